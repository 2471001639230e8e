"""Access tokens minted over HTTP (protocol.md section 17): Parley's own request, and
Deepgram's, AssemblyAI's and OpenAI's, so that each vendor's SDK gets its browser
tokens from the server as it would from the vendor (transport/access_tokens.py says
what a token is).

Minting takes the key itself: a token cannot mint another, so a leaked token dies with
its expiry. Origins are checked as on the uploads; a backend sends none. An OpenAI
client secret's ``session`` is checked as a ``session.update`` would be, and carried in
the token, so that the sessions it opens start with it.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from websockets.datastructures import Headers

from parley.core.asr import Decoding
from parley.core.vad import VadConfig
from parley.protocol.messages import ProtocolError
from parley.protocol.paths import (
    CLIENT_SECRETS_PATH,
    GRANT_PATH,
    TEMPORARY_TOKEN_PATH,
    TOKEN_PATH,
)
from parley.transport import access_tokens, file_answers, openai_answers
from parley.transport.admission import Access
from parley.transport.assemblyai import AssemblyAIDialect
from parley.transport.auth import ANONYMOUS
from parley.transport.json_body import json_object
from parley.transport.native import bearer_or_token
from parley.transport.openai_session import DEFAULT_CONFIG, SessionSettings
from parley.transport.upload_errors import UploadCode, UploadError

MAX_SESSION_BYTES = 4096  # an OpenAI client secret's session, as JSON (it rides in the token)
MAX_BODY_BYTES = 16384  # a token request's whole body: its lifetime, and that session
BODY_TIMEOUT_S = 10.0  # for that body to arrive whole


@dataclass(frozen=True)
class RealtimeDefaults:
    """What an OpenAI client secret's session is checked against: the server's turn
    detection, what its model can decode, and the model's name."""

    vad: VadConfig
    check_decoding: Callable[[Decoding], None]
    model: str


class TokenRoutes:
    """The four ways to ask for a token, each in its vendor's shapes."""

    def __init__(self, access: Access, clock: Callable[[], float], realtime: RealtimeDefaults):
        self._access = access
        self._clock = clock
        self._realtime = realtime

    def routes(self) -> list[Route]:
        """Parley's, Deepgram's, AssemblyAI's and OpenAI's token requests."""
        return [
            Route(TOKEN_PATH, self.native, methods=["POST"]),
            Route(GRANT_PATH, self.deepgram, methods=["POST"]),
            Route(TEMPORARY_TOKEN_PATH, self.assemblyai, methods=["GET"]),
            Route(CLIENT_SECRETS_PATH, self.openai, methods=["POST"]),
        ]

    async def native(self, request: Request) -> Response:
        """``POST /v1/auth/token``, ``{"ttl_s": N}`` (1 to 7200 s; 60 without a body)."""
        try:
            holder = self._holder(request, bearer_or_token(_headers(request)))
            asked = await _json_body(request)
            ttl = _seconds(
                asked.get("ttl_s"), "ttl_s", access_tokens.DEFAULT_TTL_S, 1, access_tokens.MAX_TTL_S
            )
            token, expires_at = self._mint(holder, ttl)
        except UploadError as error:
            body = {"error": error.code.value, "message": error.message}
            return JSONResponse(body, status_code=error.status)
        return JSONResponse({"token": token, "expires_at": expires_at, "expires_in": ttl})

    async def deepgram(self, request: Request) -> Response:
        """Deepgram's ``POST /v1/auth/grant``, ``{"ttl_seconds": N}`` (1 to 3600; 30)."""
        try:
            holder = self._holder(request, bearer_or_token(_headers(request)))
            asked = await _json_body(request)
            ttl = _seconds(asked.get("ttl_seconds"), "ttl_seconds", 30, 1, 3600)
            token, _ = self._mint(holder, ttl)
        except UploadError as error:
            body = file_answers.deepgram_error(error, str(uuid.uuid4()))
            return JSONResponse(body, status_code=error.status)
        return JSONResponse({"access_token": token, "expires_in": ttl})

    async def assemblyai(self, request: Request) -> Response:
        """AssemblyAI's ``GET /v3/token?expires_in_seconds=N`` (1 to 600, required;
        ``max_session_duration_seconds`` is accepted and ignored)."""
        try:
            holder = self._holder(request, AssemblyAIDialect.offered_key({}, _headers(request)))
            raw = request.query_params.get("expires_in_seconds")
            if raw is None:
                raise UploadError(UploadCode.BAD_REQUEST, "expires_in_seconds is required")
            ttl = _seconds(_number(raw), "expires_in_seconds", 0, 1, 600)
            token, _ = self._mint(holder, ttl)
        except UploadError as error:
            return JSONResponse({"error": error.message}, status_code=error.status)
        return JSONResponse({"token": token, "expires_in_seconds": ttl})

    async def openai(self, request: Request) -> Response:
        """OpenAI's ``POST /v1/realtime/client_secrets``: ``expires_after.seconds`` (10
        to 7200; 600) and a ``session`` the sessions it opens start with."""
        try:
            holder = self._holder(request, bearer_or_token(_headers(request)))
            asked = await _json_body(request)
            after = asked.get("expires_after") or {}
            if not isinstance(after, dict):
                raise UploadError(UploadCode.BAD_REQUEST, "expires_after must be an object")
            ttl = _seconds(
                after.get("seconds"), "expires_after.seconds", 600, 10, access_tokens.MAX_TTL_S
            )
            fields = asked.get("session") or {}
            settings = self._session(fields)
            token, expires_at = self._mint(holder, ttl, fields or None)
        except UploadError as error:
            return openai_answers.openai_error(error)
        session = settings.to_json(f"sess_{uuid.uuid4().hex[:24]}", self._realtime.model)
        return JSONResponse({"value": token, "expires_at": expires_at, "session": session})

    def _session(self, fields: object) -> SessionSettings:
        """The settings a client secret's ``session`` gives; UploadError as a
        ``session.update`` of them would be refused."""
        if not isinstance(fields, dict):
            raise UploadError(UploadCode.BAD_REQUEST, "session must be an object")
        if len(json.dumps(fields)) > MAX_SESSION_BYTES:
            raise UploadError(
                UploadCode.BAD_REQUEST, f"session is over {MAX_SESSION_BYTES} bytes of JSON"
            )
        vad = self._realtime.vad
        try:
            return SessionSettings(DEFAULT_CONFIG, vad).updated(
                fields, False, vad, self._realtime.check_decoding
            )
        except ProtocolError as error:
            raise UploadError(UploadCode.BAD_REQUEST, error.message, "session") from None

    def _holder(self, request: Request, offered: str | None) -> tuple[str, bytes]:
        """The name and value of the key a token may be minted for (before any body is
        read); UploadError for a page from an origin not allowed, or no key."""
        headers = _headers(request)
        if not self._access.origins.allows(headers.get("Origin"), headers.get("Host")):
            raise UploadError(
                UploadCode.FORBIDDEN_ORIGIN, "pages from this origin may not ask for tokens"
            )
        keys = self._access.keys
        if not keys.required:
            return ANONYMOUS, b""
        name = keys.identify_key(offered)
        if name is None:
            raise UploadError(
                UploadCode.UNAUTHORIZED, "an API key is required (a token cannot ask for another)"
            )
        return name, keys.secret_of(name) or b""

    def _mint(
        self, holder: tuple[str, bytes], ttl_s: int, session: dict | None = None
    ) -> tuple[str, int]:
        return access_tokens.mint(*holder, ttl_s, self._clock(), session)


def _headers(request: Request) -> Headers:
    return Headers(request.headers.items())


async def _json_body(request: Request) -> Mapping[str, Any]:
    return await json_object(request, MAX_BODY_BYTES, BODY_TIMEOUT_S, "a token request")


def _number(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise UploadError(UploadCode.BAD_REQUEST, f"{raw!r} is not a number") from None


def _seconds(value: object, name: str, default: int, low: int, high: int) -> int:
    """A lifetime in whole seconds (a fraction rounded up), within ``low`` .. ``high``."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UploadError(UploadCode.BAD_REQUEST, f"{name} must be a number of seconds")
    seconds = math.ceil(value)
    if not low <= seconds <= high:
        raise UploadError(UploadCode.BAD_REQUEST, f"{name} must be {low} to {high} seconds")
    return seconds
