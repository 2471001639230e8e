"""What every recording endpoint does before and around its own shapes: who may send,
how an upload is received within its limits, and how a job's failures become HTTP
answers (protocol.md §"Recordings").

An upload streams to an anonymous temporary file as it arrives, counted against
``files.max_upload_mb`` (a Content-Length over it is refused before reading); the
client's file name is never used for anything. The surfaces (OpenAI, Deepgram, the
reference handler) turn an ``UploadError`` into their own error shapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from websockets.datastructures import Headers

from parley.core.asr import Decoding
from parley.recordings.file_results import FileTranscript
from parley.recordings.files import Busy, Draining, FileJobs, FileRequest
from parley.recordings.media import (
    AudioTooLong,
    RawAudio,
    TooManyChannels,
    UndecodableAudio,
    decode_channels,
    decode_file,
)
from parley.runtime.metrics import Metrics
from parley.transport.admission import Access
from parley.transport.dialect import ANONYMOUS, by_key
from parley.transport.form_parser import BoundedFormParser
from parley.transport.native import bearer_or_token

log = logging.getLogger(__name__)


class UploadCode(str, Enum):
    """The errors an upload (or a model lookup) may get (protocol.md section 16)."""

    UNAUTHORIZED = "unauthorized"  # 401
    FORBIDDEN_ORIGIN = "forbidden_origin"  # 403
    MODEL_NOT_FOUND = "model_not_found"  # 404: GET /v1/models/{model} of another model
    BAD_REQUEST = "bad_request"  # 400: a missing or malformed field
    BAD_AUDIO = "bad_audio"  # 400: undecodable or empty audio
    TOO_LARGE = "too_large"  # 413: over files.max_upload_mb
    TOO_LONG = "too_long"  # 413: over files.max_duration_s
    SERVER_BUSY = "server_busy"  # 429: every job slot is taken
    TOO_MANY_JOBS = "too_many_jobs"  # 429: this key's limit
    SHUTTING_DOWN = "shutting_down"  # 503: draining
    TRANSCRIPTION_FAILED = "transcription_failed"  # 500


STATUS = {
    UploadCode.UNAUTHORIZED: 401,
    UploadCode.FORBIDDEN_ORIGIN: 403,
    UploadCode.MODEL_NOT_FOUND: 404,
    UploadCode.BAD_REQUEST: 400,
    UploadCode.BAD_AUDIO: 400,
    UploadCode.TOO_LARGE: 413,
    UploadCode.TOO_LONG: 413,
    UploadCode.SERVER_BUSY: 429,
    UploadCode.TOO_MANY_JOBS: 429,
    UploadCode.SHUTTING_DOWN: 503,
    UploadCode.TRANSCRIPTION_FAILED: 500,
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
        return {"Retry-After": str(self.retry_after_s)} if self.retry_after_s else {}


@dataclass
class Form:
    """A multipart form: its file (a temporary file of ours) and its other fields."""

    path: Path
    fields: dict[str, list[str]]

    def get(self, name: str, default: str | None = None) -> str | None:
        values = self.fields.get(name)
        return values[-1] if values else default

    def all(self, name: str) -> list[str]:
        return self.fields.get(name, [])


@dataclass
class FileDoor:
    """The checks and the job runner every recording endpoint shares."""

    jobs: FileJobs
    access: Access
    metrics: Metrics
    check_decoding: Callable[[Decoding], None]
    max_jobs_per_key: int | None = None

    def __post_init__(self) -> None:
        self._per_key: Counter[str] = Counter()

    def authorize(self, request: Request) -> str:
        """The key's name (ANONYMOUS without keys); UploadError when it may not send."""
        headers = Headers(request.headers.items())
        if not self.access.origins.allows(headers.get("Origin"), headers.get("Host")):
            raise UploadError(
                UploadCode.FORBIDDEN_ORIGIN, "pages from this origin may not send to this server"
            )
        offered = bearer_or_token(headers) or request.query_params.get("token")
        key = by_key(self.access.keys, offered)
        if key is None:
            raise UploadError(UploadCode.UNAUTHORIZED, "a valid API key is required")
        return key

    def _check_length(self, request: Request) -> None:
        length = request.headers.get("content-length")
        if (
            length is not None
            and length.isascii()
            and length.isdigit()
            and int(length) > self.jobs.limits.max_bytes
        ):
            raise self._too_large()

    def _too_large(self) -> UploadError:
        return UploadError(
            UploadCode.TOO_LARGE, f"the upload exceeds {self.jobs.limits.max_bytes / 2**20:g} MiB"
        )

    async def _counted(self, request: Request) -> AsyncGenerator[bytes, None]:
        received = 0
        async for chunk in request.stream():
            received += len(chunk)
            if received > self.jobs.limits.max_bytes:
                raise self._too_large()
            yield chunk

    @contextlib.asynccontextmanager
    async def form(self, request: Request, file_field: str = "file") -> AsyncIterator[Form]:
        """The multipart form, its file copied to a temporary file of ours (deleted after)."""
        self._check_length(request)
        if not request.headers.get("content-type", "").startswith("multipart/form-data"):
            raise UploadError(
                UploadCode.BAD_REQUEST,
                "send the recording as "
                "multipart/form-data, with the audio in the field "
                f"{file_field!r}",
                param=file_field,
            )
        parser = BoundedFormParser(request.headers, self._counted(request), max_files=4)
        try:
            data = await parser.parse()
        except MultiPartException as exc:
            raise UploadError(UploadCode.BAD_REQUEST, f"malformed form: {exc.message}") from None
        try:
            upload = data.get(file_field)
            if not isinstance(upload, UploadFile):
                raise UploadError(
                    UploadCode.BAD_REQUEST,
                    f"the form has no file field {file_field!r}",
                    param=file_field,
                )
            fields: dict[str, list[str]] = {}
            for name, value in data.multi_items():
                if isinstance(value, str):
                    fields.setdefault(name, []).append(value)
            with tempfile.NamedTemporaryFile(prefix="parley-upload-") as copy:
                await upload.seek(0)
                # up to max_upload_mb of disk I/O: off the event loop
                await asyncio.to_thread(shutil.copyfileobj, upload.file, copy)
                copy.flush()
                yield Form(Path(copy.name), fields)
        finally:
            await data.close()

    @contextlib.asynccontextmanager
    async def body(self, request: Request) -> AsyncIterator[Path]:
        """The request body, streamed to a temporary file of ours (deleted after)."""
        self._check_length(request)
        with tempfile.NamedTemporaryFile(prefix="parley-upload-") as copy:
            async for chunk in self._counted(request):
                copy.write(chunk)
            copy.flush()
            yield Path(copy.name)

    async def transcribe(
        self,
        path: Path,
        request: FileRequest,
        key: str,
        on_text: Callable[[str], None] | None = None,
    ) -> FileTranscript:
        """Decode (mixed to one channel) and transcribe, within the job bound and the
        key's; UploadError on anything the client should be told."""
        (transcript,) = await self.transcribe_channels(path, request, key, on_text, apart=False)
        return transcript

    async def transcribe_channels(
        self,
        path: Path,
        request: FileRequest,
        key: str,
        on_text: Callable[[str], None] | None = None,
        apart: bool = True,
        raw: RawAudio | None = None,
    ) -> list[FileTranscript]:
        """As ``transcribe``, each channel of the file a recording of its own (``apart``),
        one after the other in the one job; ``raw``: what a headerless body is."""
        outcome = "done"
        try:
            self._check_request(request)
            per_key = self.max_jobs_per_key
            if per_key is not None and key != ANONYMOUS and self._per_key[key] >= per_key:
                raise UploadError(
                    UploadCode.TOO_MANY_JOBS,
                    f"this key has its limit of {per_key} recordings running",
                    retry_after_s=5,
                )
            try:
                with self.jobs.slot():
                    self._per_key[key] += 1
                    self.metrics.files_running.inc()
                    try:
                        return await self._run(path, request, on_text, apart, raw)
                    except asyncio.CancelledError:
                        task = asyncio.current_task()
                        if not self.jobs.draining or task is None:
                            raise
                        task.uncancel()  # the drain's deadline, not the client's leaving
                        raise UploadError(
                            UploadCode.SHUTTING_DOWN,
                            "the server shut down before the recording was done",
                        ) from None
                    finally:
                        self._per_key[key] -= 1
                        self.metrics.files_running.dec()
            except Busy as busy:
                raise UploadError(
                    UploadCode.SERVER_BUSY,
                    f"the server is transcribing its "
                    f"limit of {self.jobs.limits.max_jobs} recordings; try "
                    "again later",
                    retry_after_s=busy.retry_after_s,
                ) from None
            except Draining:
                raise UploadError(UploadCode.SHUTTING_DOWN, "the server is shutting down") from None
        except UploadError as error:
            outcome = error.code.value
            raise
        except asyncio.CancelledError:
            outcome = "cancelled"  # the client left
            raise
        except BaseException:
            outcome = UploadCode.TRANSCRIPTION_FAILED.value
            raise
        finally:
            self.metrics.file_jobs.labels(outcome).inc()

    def _check_request(self, request: FileRequest) -> None:
        try:
            self.check_decoding(request.config.decoding)
        except ValueError as exc:
            raise UploadError(UploadCode.BAD_REQUEST, str(exc)) from None
        if request.diarize and not self.jobs.can_diarize:
            raise UploadError(
                UploadCode.BAD_REQUEST,
                "diarization is not available on this server (start it with --diarization bundle)",
                param="diarize",
            )

    async def _run(
        self,
        path: Path,
        request: FileRequest,
        on_text: Callable[[str], None] | None,
        apart: bool,
        raw: RawAudio | None,
    ) -> list[FileTranscript]:
        limit = self.jobs.limits.max_seconds
        try:
            channels = (
                await decode_channels(path, limit, raw)
                if apart
                else [await decode_file(path, limit, raw)]
            )
        except UndecodableAudio as exc:
            raise UploadError(UploadCode.BAD_AUDIO, str(exc), param="file") from None
        except AudioTooLong as exc:
            raise UploadError(UploadCode.TOO_LONG, str(exc), param="file") from None
        except TooManyChannels as exc:
            raise UploadError(UploadCode.BAD_REQUEST, str(exc), param="multichannel") from None
        return [await self._transcribed(audio, request, on_text) for audio in channels]

    async def _transcribed(
        self, audio: np.ndarray, request: FileRequest, on_text: Callable[[str], None] | None
    ) -> FileTranscript:
        try:
            transcript = await self.jobs.transcribe(audio, request, on_text=on_text)
        except Exception as exc:
            log.exception("a recording could not be transcribed")
            raise UploadError(
                UploadCode.TRANSCRIPTION_FAILED, f"the recording could not be transcribed: {exc}"
            ) from None
        self.metrics.file_audio_seconds.inc(transcript.duration)
        self.metrics.file_queue_wait.observe(transcript.queue_wait_s)
        if transcript.processing_s > 0:
            self.metrics.file_real_time_factor.observe(
                transcript.duration / transcript.processing_s
            )
        return transcript
