"""/v1/twilio: Twilio Media Streams, each direction of a call transcribed on its own.

Twilio connects to Parley (a ``<Stream>`` in the call's TwiML) and sends JSON events:
``connected``, ``start``, ``media`` (base64 8 kHz mu-law, per track), ``mark``,
``dtmf``, ``stop``. It reads nothing back on that socket, so results leave by the
result webhooks (and the server's logs and metrics). Each track is a session of its
own whose speaker is the track's name: ``caller`` (inbound) and ``agent`` (outbound)
unless the call's customParameters rename them. protocol.md section 11 is the contract.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Mapping
from http import HTTPStatus

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from parley.protocol.messages import (
    Encoding,
    Error,
    ErrorCode,
    ProtocolError,
    ServerMessage,
    StreamConfig,
)
from parley.protocol.paths import TWILIO_PATH
from parley.protocol.stream_config import DECODING_OPTIONS
from parley.sessions.marks import Mark, WebhookEvent
from parley.sessions.session_group import SessionGroup
from parley.sessions.streams import StreamFactory
from parley.transport.auth import ApiKeys
from parley.transport.dialect import Opened, Setup, by_key, json_event, json_object
from parley.transport.http import json_response
from parley.transport.timed_track import TimedTrack

TWILIO_KEY_NAME = "twilio"  # the key name of connections admitted by Twilio's signature
TRACK_SPEAKERS = {"inbound": "caller", "outbound": "agent"}
RENAME_PARAMETERS = {"inbound": "inbound_speaker", "outbound": "outbound_speaker"}


def twilio_signature(auth_token: str, url: str) -> str:
    """Twilio's request signature of a URL with no POST parameters (a WebSocket
    handshake): base64 HMAC-SHA1 of the URL under the account's auth token."""
    digest = hmac.new(auth_token.encode(), url.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


class TwilioDialect:
    """Twilio Media Streams on ``/v1/twilio`` (protocol.md section 11)."""

    path = TWILIO_PATH
    resumable = False

    def __init__(self, auth_token: str | None, public_url: str | None = None):
        self._auth_token = auth_token
        self._public_url = public_url.rstrip("/") if public_url else None

    def identify(self, request: Request, params: Mapping[str, str], keys: ApiKeys) -> str | None:
        """With an auth token, Twilio's signature of the URL admits (and nothing else
        does); without one, the server's keys as ``?token=``."""
        if self._auth_token is None:
            return by_key(keys, params.get("token"))
        offered = request.headers.get("X-Twilio-Signature", "")
        host = request.headers.get("Host", "")
        # Twilio signs the URL it was given: the configured public one, else wss:// (or
        # ws://, on a test loop) and the Host the request came to.
        bases = [self._public_url] if self._public_url else [f"wss://{host}", f"ws://{host}"]
        for base in bases:
            expected = twilio_signature(self._auth_token, base + request.path)
            if offered and hmac.compare_digest(expected, offered):
                return TWILIO_KEY_NAME
        return None

    def setup(self, params: Mapping[str, str], headers: Headers) -> Setup[None]:
        config = StreamConfig(encoding=Encoding.MULAW, sample_rate=8000, partials=False)
        return Setup(config, options=None)

    def subprotocol(self, offered: list[str]) -> str | None:
        return None

    def refusal(self, error: Error) -> Response:
        """Refused at the handshake: Twilio reads only the HTTP status of a refusal."""
        status = {
            ErrorCode.UNAUTHORIZED: HTTPStatus.FORBIDDEN,
            ErrorCode.SERVER_BUSY: HTTPStatus.SERVICE_UNAVAILABLE,
            ErrorCode.SHUTTING_DOWN: HTTPStatus.SERVICE_UNAVAILABLE,
            ErrorCode.TOO_MANY_SESSIONS: HTTPStatus.TOO_MANY_REQUESTS,
        }.get(error.code, HTTPStatus.BAD_REQUEST)
        return json_response(status, {"error": error.code.value, "message": error.message})

    def error(self, error: Error) -> str:
        return json.dumps({"event": "error", "code": error.code.value, "message": error.message})

    def translator(self, opened: Opened[None], streams: StreamFactory) -> TwilioTranslator:
        return TwilioTranslator(opened, streams.tracks(opened.setup.config, opened.setup.vad))


class TwilioTranslator:
    """One call: each direction a session, results to the webhooks."""

    def __init__(self, opened: Opened[None], group: SessionGroup):
        self._opened = opened
        self._group = group
        self._config = opened.setup.config
        self._speakers = dict(TRACK_SPEAKERS)
        self._tracks: dict[str, TimedTrack] = {}
        self._started = False

    def opening(self) -> list[str]:
        return []  # Twilio reads nothing on this socket

    @property
    def stream(self) -> SessionGroup:
        return self._group

    async def receive(self, message: str | bytes) -> bool:
        session = self._group
        event = json_event(
            message, ("event",), 'Twilio sends JSON text objects with a string "event"'
        )
        kind = event.get("event")
        if kind == "media":
            await self._media(event, session)
        elif kind == "start":
            await self._start(event, session)
        elif kind == "dtmf":
            dtmf = json_object(event.get("dtmf"), "dtmf")
            await session.mark(
                WebhookEvent("call.dtmf", {"track": dtmf.get("track"), "digit": dtmf.get("digit")})
            )
        elif kind == "stop":
            return True
        elif kind not in ("connected", "mark"):
            raise ProtocolError(ErrorCode.BAD_MESSAGE, f"unknown Twilio event {kind!r}")
        return False

    async def _start(self, event: dict, session: SessionGroup) -> None:
        start = json_object(event.get("start"), "start")
        media_format = json_object(start.get("mediaFormat"), "start.mediaFormat")
        if (
            media_format.get("encoding", "audio/x-mulaw") != "audio/x-mulaw"
            or str(media_format.get("sampleRate", 8000)) != "8000"
            or str(media_format.get("channels", 1)) != "1"
        ):
            raise ProtocolError(
                ErrorCode.BAD_CONFIG,
                f"Twilio media must be audio/x-mulaw, 8000 Hz, one channel; got {media_format}",
            )
        parameters = json_object(start.get("customParameters"), "start.customParameters")
        for track, parameter in RENAME_PARAMETERS.items():
            if parameters.get(parameter):
                self._speakers[track] = str(parameters[parameter])
        # The <Stream>'s <Parameter>s set the call's decoding as /v1/stream's query does.
        chosen = {name: str(parameters[name]) for name in DECODING_OPTIONS if parameters.get(name)}
        if chosen:
            config = StreamConfig.from_query({**self._config.to_query(), **chosen})
            try:
                self._opened.check_decoding(config.decoding)
            except ValueError as exc:
                raise ProtocolError(ErrorCode.BAD_CONFIG, str(exc)) from None
            self._config = config
        self._started = True
        await session.mark(
            WebhookEvent(
                "call.started",
                {
                    "call_sid": start.get("callSid"),
                    "stream_sid": start.get("streamSid"),
                    "account_sid": start.get("accountSid"),
                    "tracks": start.get("tracks"),
                    "speakers": {t: self._speakers[t] for t in _names(start.get("tracks"))},
                    "custom_parameters": parameters,
                },
            )
        )

    async def _media(self, event: dict, session: SessionGroup) -> None:
        media = json_object(event.get("media"), "media")
        name = media.get("track", "inbound")
        if not isinstance(name, str) or name not in TRACK_SPEAKERS:
            raise ProtocolError(ErrorCode.BAD_MESSAGE, f"unknown media track {name!r}")
        try:
            payload = base64.b64decode(str(media.get("payload", "")), validate=True)
            timestamp_ms = int(str(media.get("timestamp", 0)))  # numbers come as strings
        except (binascii.Error, ValueError):
            raise ProtocolError(
                ErrorCode.BAD_AUDIO,
                "media needs a base64 payload and a numeric timestamp; the chunk was dropped",
            ) from None
        track = self._tracks.setdefault(name, TimedTrack(self._config))
        stream = session.track(name, self._config, self._speakers[name])
        # Timing follows the timestamps: a gap in the media is silence in the track.
        await track.feed(stream, payload, timestamp_ms / 1000)

    def outbound(self, message: ServerMessage | Mark) -> list[str]:
        return []  # results go to the webhooks; Twilio would not read them here


def _names(tracks: object) -> list[str]:
    """The tracks a start names that Parley knows (others are Twilio's business)."""
    if not isinstance(tracks, list):
        return []
    return [t for t in tracks if isinstance(t, str) and t in TRACK_SPEAKERS]
