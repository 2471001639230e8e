"""The errors of protocol.md section 4 and the close codes of section 5: what every
wire's error is made of (pure)."""

from __future__ import annotations

from enum import Enum


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
    def close_code(self) -> int | None:
        return _CLOSE_CODES.get(self)


_CLOSE_CODES: dict[ErrorCode, int] = {
    ErrorCode.UNAUTHORIZED: 4401,
    ErrorCode.FORBIDDEN_ORIGIN: 4403,
    ErrorCode.NOT_FOUND: 4404,
    ErrorCode.TOO_MANY_SESSIONS: 4429,
    ErrorCode.BAD_CONFIG: 4400,
    ErrorCode.FRAME_TOO_LARGE: 1009,
    ErrorCode.SERVER_BUSY: 1013,
    ErrorCode.IDLE_TIMEOUT: 4408,
    ErrorCode.SHUTTING_DOWN: 1001,
    ErrorCode.INTERNAL_ERROR: 1011,
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
