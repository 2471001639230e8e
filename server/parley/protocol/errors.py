"""The errors of protocol.md section 4 and the close codes of section 5: what every
wire's error is made of (pure)."""

from __future__ import annotations

from enum import Enum, IntEnum


class CloseCode(IntEnum):
    """Every close code a Parley WebSocket ends with (section 5)."""

    NORMAL = 1000  # after session_ended (end_of_stream)
    GOING_AWAY = 1001  # the server is shutting down
    MESSAGE_TOO_BIG = 1009
    INTERNAL_ERROR = 1011
    TRY_AGAIN_LATER = 1013  # server busy
    BAD_CONFIG = 4400
    UNAUTHORIZED = 4401
    FORBIDDEN_ORIGIN = 4403
    NOT_FOUND = 4404
    IDLE_TIMEOUT = 4408
    TAKEN_OVER = 4409  # the session was resumed on another connection
    MAX_DURATION = 4410  # after session_ended (max_duration)
    TOO_MANY_SESSIONS = 4429


class ErrorCode(str, Enum):
    """Error codes and the close code each one ends the connection with (None: not fatal)."""

    UNAUTHORIZED = "unauthorized"
    FORBIDDEN_ORIGIN = "forbidden_origin"
    NOT_FOUND = "not_found"
    TOO_MANY_SESSIONS = "too_many_sessions"
    BAD_CONFIG = "bad_config"
    BAD_MESSAGE = "bad_message"
    BAD_AUDIO = "bad_audio"
    FRAME_TOO_LARGE = "frame_too_large"
    SERVER_BUSY = "server_busy"
    IDLE_TIMEOUT = "idle_timeout"
    TRANSCRIPTION_FAILED = "transcription_failed"
    DIARIZATION_FAILED = "diarization_failed"
    TOO_MANY_PARTICIPANTS = "too_many_participants"
    SHUTTING_DOWN = "shutting_down"
    INTERNAL_ERROR = "internal_error"

    @property
    def close_code(self) -> CloseCode | None:
        return _CLOSE_CODES.get(self)


_CLOSE_CODES: dict[ErrorCode, CloseCode] = {
    ErrorCode.UNAUTHORIZED: CloseCode.UNAUTHORIZED,
    ErrorCode.FORBIDDEN_ORIGIN: CloseCode.FORBIDDEN_ORIGIN,
    ErrorCode.NOT_FOUND: CloseCode.NOT_FOUND,
    ErrorCode.TOO_MANY_SESSIONS: CloseCode.TOO_MANY_SESSIONS,
    ErrorCode.BAD_CONFIG: CloseCode.BAD_CONFIG,
    ErrorCode.FRAME_TOO_LARGE: CloseCode.MESSAGE_TOO_BIG,
    ErrorCode.SERVER_BUSY: CloseCode.TRY_AGAIN_LATER,
    ErrorCode.IDLE_TIMEOUT: CloseCode.IDLE_TIMEOUT,
    ErrorCode.SHUTTING_DOWN: CloseCode.GOING_AWAY,
    ErrorCode.INTERNAL_ERROR: CloseCode.INTERNAL_ERROR,
}


MAX_CLOSE_REASON_BYTES = 123  # RFC 6455: a close frame's payload is at most 125 bytes


def close_reason(text: str) -> str:
    """``text`` cut to fit a close frame (123 bytes of UTF-8), on a character boundary."""
    encoded = text.encode("utf-8")
    if len(encoded) <= MAX_CLOSE_REASON_BYTES:
        return text
    cut = encoded[: MAX_CLOSE_REASON_BYTES - len("…".encode())]
    return cut.decode("utf-8", errors="ignore") + "…"


class ProtocolError(Exception):
    """A client did something protocol.md does not allow."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message
