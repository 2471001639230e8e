"""The seam between the one streaming endpoint and the wires it speaks.

Parley's own protocol, Deepgram's live API and OpenAI's realtime transcription are
*dialects*: each reads a connection's settings from its handshake, then translates
that client's messages into calls on one ``Session`` and the session's messages into
its own. Admission, limits, draining, idle and duration timeouts, metrics and logs are
the endpoint's, the same for every dialect (transport/ws_server.py, session_loop.py
and client_reader.py).

A ``Dialect`` is shared by all connections on its path and holds no per-connection
state; ``Dialect.translator`` makes a ``Translator`` for one connection, over the kind
of stream its wire drives (one ``Session``, or a ``SessionGroup`` of tracks), which it
builds with the endpoint's ``StreamFactory``: each translator is typed by its kind.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, replace
from typing import Generic, Protocol, TypeVar, runtime_checkable
from urllib.parse import urlsplit

from starlette.datastructures import QueryParams
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from parley.core.asr import Decoding
from parley.core.vad import VadConfig
from parley.protocol.messages import Error, ErrorCode, ProtocolError, ServerMessage, StreamConfig
from parley.sessions.marks import Mark
from parley.sessions.streams import Stream, StreamFactory
from parley.transport.auth import ANONYMOUS, ApiKeys

# Turn detection asked of a compatible endpoint (Deepgram's endpointing, OpenAI's
# silence_duration_ms) is raised to the server's own default: Whisper needs whole
# phrases, and shorter pauses would cut them.
MIN_TURN_SILENCE_MS = VadConfig.min_silence_ms


def turn_detection(base: VadConfig, silence_ms: int, pad_ms: int | None = None) -> VadConfig:
    """A client's end-of-turn silence (and speech padding) as the VAD's: at least
    MIN_TURN_SILENCE_MS, in whole frames, the padding no longer than the silence."""
    silence = max(silence_ms, MIN_TURN_SILENCE_MS) // base.frame_ms * base.frame_ms
    pad = min(base.speech_pad_ms if pad_ms is None else pad_ms, silence)
    return replace(base, min_silence_ms=silence, speech_pad_ms=pad)


def query_of(request: Request) -> QueryParams:
    """A handshake's query string: a mapping to each name's last value, whose
    ``getlist`` gives every value of a repeated one (Deepgram's ``keyterm``)."""
    return QueryParams(urlsplit(request.path).query)


def number_in(raw: object, least: float, most: float, name: str) -> float:
    """A setting's number (a query value, or a JSON number) from ``least`` to ``most``;
    ProtocolError(bad_config) for anything else."""
    try:
        value = float(str(raw))
    except ValueError:
        value = float("nan")
    if not least <= value <= most:
        raise ProtocolError(
            ErrorCode.BAD_CONFIG, f"{name} must be a number from {least:g} to {most:g}"
        )
    return value


def every(params: Mapping[str, str], name: str) -> list[str]:
    """Every value of ``name`` in ``params`` (repeated, or one of a plain mapping)."""
    if isinstance(params, QueryParams):
        return params.getlist(name)
    return [params[name]] if name in params else []


def control_of(message: str) -> tuple[str | None, dict]:
    """A text message's ``type`` and body, as the compatible wires name their control
    messages; (None, {}) for anything that is no JSON object."""
    try:
        data = json.loads(message)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the stack
        return None, {}
    if not isinstance(data, dict):
        return None, {}
    kind = data.get("type")
    return (kind if isinstance(kind, str) else None), data


def json_object(value: object, name: str) -> dict:
    """A client's JSON field that must be an object (absent or null: empty);
    ProtocolError(bad_message) for anything else."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"{name} must be a JSON object")
    return value


def by_key(keys: ApiKeys, offered: str | None) -> str | None:
    """Admission by the server's API keys: the key's name, ANONYMOUS, or None."""
    return keys.identify(offered) if keys.required else ANONYMOUS


class KeyOffered(ABC):
    """For dialects whose clients offer one of the server's API keys: ``identify`` by the
    key their ``offered_key`` finds."""

    @staticmethod
    @abstractmethod
    def offered_key(params: Mapping[str, str], headers: Headers) -> str | None:
        """The key the client offers, wherever this wire carries it; None: none."""

    def identify(self, request: Request, params: Mapping[str, str], keys: ApiKeys) -> str | None:
        """The name of the key the client is admitted by (or ANONYMOUS, or None)."""
        return by_key(keys, self.offered_key(params, request.headers))


def json_event(message: str | bytes, kinds: tuple[str, ...], wrong: str) -> dict:
    """A client's text message as a JSON object naming its kind as a string in the first
    of ``kinds`` it has; ProtocolError(bad_message) saying ``wrong`` for anything else
    (a binary message included)."""
    data = None
    if isinstance(message, str):
        try:
            data = json.loads(message)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than the stack
            pass
    if not isinstance(data, dict) or not isinstance(
        next((data[k] for k in kinds if data.get(k)), None), str
    ):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, wrong)
    return data


# A dialect's own settings, read at the handshake for its translator (None for most).
Options = TypeVar("Options")


@dataclass(frozen=True)
class Setup(Generic[Options]):
    """A connection's settings as its dialect read them from the handshake."""

    config: StreamConfig
    vad: VadConfig | None = None  # None: the server's
    webhook_url: str | None = None  # the session's own webhook target, if it names one
    _: KW_ONLY
    options: Options  # the dialect's own, for its translator


@dataclass(frozen=True)
class Opened(Generic[Options]):
    """What the endpoint tells a translator about the connection it serves."""

    session_id: str
    setup: Setup[Options]
    model: str
    limits: dict
    check_decoding: Callable[[Decoding], None]  # ValueError for what the model cannot do
    server: str | None = None  # the serving replica's name, on a cluster
    resume_token: str | None = None  # a resumable session's
    model_languages: tuple[str, ...] = ("en",)  # what the model transcribes


class Translator(Protocol):
    """One connection's translation, both ways, over the stream it drives (per-connection
    state lives here)."""

    @property
    def stream(self) -> Stream:
        """The session, or group of track sessions, this connection drives."""
        ...

    def opening(self) -> list[str]:
        """Messages sent once the connection is admitted, before any result."""

    async def receive(self, message: str | bytes) -> bool:
        """Act on one client message (feed audio, finalize, reconfigure, ...); True when
        the client asked to end the stream (the endpoint then ends the session).
        ProtocolError for a message it refuses: the endpoint reports it, non-fatal."""

    def outbound(self, message: ServerMessage | Mark) -> list[str]:
        """The dialect's messages for one session message (none, one or several)."""


@runtime_checkable
class RefusesAtHandshake(Protocol):
    """A dialect's optional capability: refusals before the session (bad key, full server,
    bad settings) answer the handshake with an HTTP error, as this wire's vendor does.
    A dialect without it refuses with an error message and a close after the handshake
    (Parley's own rule, for browsers: protocol.md section 1)."""

    def refusal(self, error: Error) -> Response:
        """The HTTP answer refusing the handshake."""
        ...


class Dialect(Protocol[Options]):
    """A wire the endpoint speaks, shared by every connection on its path."""

    path: str
    # Whether a session outlives a dropped connection and may be resumed (section 6a).
    resumable: bool

    def identify(self, request: Request, params: Mapping[str, str], keys: ApiKeys) -> str | None:
        """The name of the key the client is admitted by (ANONYMOUS on a server without
        keys), or None: unauthorised."""

    def setup(self, params: Mapping[str, str], headers: Headers) -> Setup[Options]:
        """The stream's settings; ProtocolError when they are not acceptable."""

    def subprotocol(self, offered: list[str]) -> str | None:
        """The WebSocket subprotocol to answer with, of those the client offered."""

    def error(self, error: Error) -> str:
        """The dialect's form of a fatal error, sent before the close."""

    def translator(self, opened: Opened[Options], streams: StreamFactory) -> Translator:
        """One admitted connection's translator, over a stream it builds with ``streams``."""
        ...
