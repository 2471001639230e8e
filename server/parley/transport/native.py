"""Parley's own wire, /v1/stream (protocol.md sections 1 to 8)."""

from __future__ import annotations

from collections.abc import Mapping

from websockets.datastructures import Headers

from parley.protocol.messages import (
    ControlType,
    Error,
    ServerMessage,
    SessionResumed,
    SessionStarted,
    StreamConfig,
    control_fields,
    encode,
)
from parley.protocol.paths import STREAM_PATH
from parley.sessions.marks import Mark
from parley.sessions.session import Session
from parley.sessions.streams import StreamFactory
from parley.transport.dialect import KeyOffered, Opened, Setup
from parley.transport.known_speakers import stream_known_speaker


def bearer_or_token(headers: Headers) -> str | None:
    """The credentials of ``Authorization: Bearer KEY`` or ``Authorization: Token KEY``."""
    scheme, _, credentials = headers.get("Authorization", "").partition(" ")
    return credentials.strip() if scheme.lower() in ("bearer", "token") else None


class ParleyKeysAndErrors(KeyOffered):
    """Parley's own key (``?token=`` or ``Authorization``), no subprotocol, and its own
    error message: shared by /v1/stream and /v1/meeting."""

    @staticmethod
    def offered_key(params: Mapping[str, str], headers: Headers) -> str | None:
        offered = params.get("token")
        return offered if offered is not None else bearer_or_token(headers)

    def subprotocol(self, offered: list[str]) -> str | None:
        return None

    def error(self, error: Error) -> str:
        return encode(error)


class NativeDialect(ParleyKeysAndErrors):
    """Parley's own wire on ``/v1/stream`` (protocol.md sections 1 to 8)."""

    path = STREAM_PATH
    resumable = True

    def setup(self, params: Mapping[str, str], headers: Headers) -> Setup[None]:
        return Setup(
            StreamConfig.from_query(params), webhook_url=params.get("webhook_url"), options=None
        )

    def translator(self, opened: Opened[None], streams: StreamFactory) -> NativeTranslator:
        return NativeTranslator(opened, streams.single(opened.setup.config, opened.setup.vad))


class NativeWire:
    """Parley's own messages out (session_started, results; numbered when resumable), for
    a connection of one session or of tracks."""

    def __init__(self, opened: Opened[None]):
        self._opened = opened
        self._seq = 0  # of the last message out, on a resumable session

    def opening(self) -> list[str]:
        opened = self._opened
        return [
            encode(
                SessionStarted(
                    opened.session_id,
                    opened.setup.config,
                    opened.limits,
                    opened.model,
                    opened.server,
                    opened.resume_token,
                    list(opened.model_languages),
                )
            )
        ]

    def outbound(self, message: ServerMessage | Mark) -> list[str]:
        if isinstance(message, Mark):
            return []
        if self._opened.resume_token is None:
            return [encode(message)]
        self._seq += 1  # numbered as the endpoint's SentLog numbers them
        return [encode(message, seq=self._seq)]


class NativeTranslator(NativeWire):
    """One native connection: its messages to and from its session."""

    def __init__(self, opened: Opened[None], session: Session):
        super().__init__(opened)
        self._session = session
        self._audio_bytes = 0  # audio received, for a resumed client to go on from

    @property
    def stream(self) -> Session:
        return self._session

    def resumed(self, last_seq: int) -> str:
        """The first message on a connection that resumed the session."""
        return encode(SessionResumed(self._opened.session_id, self._audio_bytes, last_seq))

    async def receive(self, message: str | bytes) -> bool:
        session = self._session
        if isinstance(message, bytes):
            self._audio_bytes += len(message)  # received, even if it proves malformed
            await session.feed(message)
            return False
        fields = control_fields(message)
        kind = ControlType(fields["type"])
        if kind is ControlType.FINALIZE:
            await session.finalize()
        elif kind is ControlType.KNOWN_SPEAKER:
            await stream_known_speaker(session.speakers, fields)
        return kind is ControlType.END_OF_STREAM
