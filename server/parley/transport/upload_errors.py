"""The errors a recording endpoint answers (protocol.md section 16, "Limits and
errors"): a code, its HTTP status, and what the client is told. The surfaces (OpenAI,
Deepgram, the reference handler, AssemblyAI) each give them their own shape."""

from __future__ import annotations

from enum import Enum


class UploadCode(str, Enum):
    """The errors an upload (or a model lookup) may get (protocol.md section 16)."""

    UNAUTHORIZED = "unauthorized"  # 401
    FORBIDDEN_ORIGIN = "forbidden_origin"  # 403
    MODEL_NOT_FOUND = "model_not_found"  # 404: GET /v1/models/{model} of another model
    NOT_FOUND = "not_found"  # 404: a transcript id (AssemblyAI's) that this key has not
    BAD_REQUEST = "bad_request"  # 400: a missing or malformed field
    BAD_AUDIO = "bad_audio"  # 400: undecodable or empty audio
    IDLE_TIMEOUT = "idle_timeout"  # 408: the body stopped arriving
    TOO_LARGE = "too_large"  # 413: over files.max_upload_mb
    TOO_LONG = "too_long"  # 413: over files.max_duration_s
    SERVER_BUSY = "server_busy"  # 429: every job slot (or upload slot) is taken
    TOO_MANY_JOBS = "too_many_jobs"  # 429: this key's limit
    SHUTTING_DOWN = "shutting_down"  # 503: draining
    TRANSCRIPTION_FAILED = "transcription_failed"  # 500
    # The client closed its connection before its upload was in: an answer nobody reads
    # (nginx's 499), so that the route ends quietly and the outcome is counted.
    CANCELLED = "cancelled"  # 499


STATUS = {
    UploadCode.UNAUTHORIZED: 401,
    UploadCode.FORBIDDEN_ORIGIN: 403,
    UploadCode.MODEL_NOT_FOUND: 404,
    UploadCode.NOT_FOUND: 404,
    UploadCode.BAD_REQUEST: 400,
    UploadCode.BAD_AUDIO: 400,
    UploadCode.IDLE_TIMEOUT: 408,
    UploadCode.TOO_LARGE: 413,
    UploadCode.TOO_LONG: 413,
    UploadCode.SERVER_BUSY: 429,
    UploadCode.TOO_MANY_JOBS: 429,
    UploadCode.SHUTTING_DOWN: 503,
    UploadCode.TRANSCRIPTION_FAILED: 500,
    UploadCode.CANCELLED: 499,
}


class UploadError(Exception):
    """A refused upload: its code, HTTP status and message."""

    def __init__(
        self,
        code: UploadCode,
        message: str,
        param: str | None = None,
        retry_after_s: int | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param
        self.retry_after_s = retry_after_s

    @property
    def status(self) -> int:
        return STATUS[self.code]

    def headers(self) -> dict[str, str]:
        headers = {"Retry-After": str(self.retry_after_s)} if self.retry_after_s else {}
        if self.code is UploadCode.IDLE_TIMEOUT:
            headers["Connection"] = "close"  # the rest of its body will not be read
        return headers
