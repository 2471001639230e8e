"""What every recording endpoint does before and around its own shapes: who may send,
whether a job could start before its upload is read (upload_body.py receives it
within its bounds), and how a job's failures become HTTP answers (protocol.md
§"Recordings"). The surfaces (OpenAI, Deepgram, the reference handler, AssemblyAI) turn an
``UploadError`` into their own error shapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
from starlette.requests import Request
from websockets.datastructures import Headers

from parley.core.asr import Decoding
from parley.core.audio import SAMPLE_RATE
from parley.recordings.file_results import WHOLE, FileTranscript, Span, shifted
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
from parley.transport.auth import ANONYMOUS
from parley.transport.dialect import by_key
from parley.transport.native import bearer_or_token
from parley.transport.upload_body import Form, UploadReceiver
from parley.transport.upload_errors import UploadCode, UploadError

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class FileDoor:
    """The checks and the job runner every recording endpoint shares."""

    jobs: FileJobs
    access: Access
    metrics: Metrics
    check_decoding: Callable[[Decoding], None]
    receiver: UploadReceiver
    max_jobs_per_key: int | None = None

    def __post_init__(self) -> None:
        self._per_key: Counter[str] = Counter()

    def authorize(self, request: Request, offered: str | None = None) -> str:
        """The key's name (ANONYMOUS without keys); UploadError when it may not send.
        ``offered``: the key as the surface's own clients send it (else a bearer token,
        ``Token KEY`` or ``?token=``)."""
        headers = Headers(request.headers.items())
        if not self.access.origins.allows(headers.get("Origin"), headers.get("Host")):
            raise UploadError(
                UploadCode.FORBIDDEN_ORIGIN, "pages from this origin may not send to this server"
            )
        offered = offered or bearer_or_token(headers) or request.query_params.get("token")
        key = by_key(self.access.keys, offered)
        if key is None:
            raise UploadError(UploadCode.UNAUTHORIZED, "a valid API key is required")
        return key

    def form(self, request: Request, key: str) -> AbstractAsyncContextManager[Form]:
        """The multipart form with its file, once ``key`` could start a job."""
        return self._received(key, self.receiver.form(request))

    def body(self, request: Request, key: str) -> AbstractAsyncContextManager[Path]:
        """The request body as a file, once ``key`` could start a job."""
        return self._received(key, self.receiver.body(request))

    @contextlib.asynccontextmanager
    async def _received(self, key: str, upload: AbstractAsyncContextManager[T]) -> AsyncIterator[T]:
        """``upload`` entered once its job could start now, so that nothing is read only to
        be refused; a refusal before the job is counted among the jobs' outcomes."""
        async with contextlib.AsyncExitStack() as stack:
            try:
                self._admit(key)
                received = await stack.enter_async_context(upload)
            except UploadError as error:
                self.metrics.file_jobs.labels(error.code.value).inc()
                raise
            yield received

    def check_open(self) -> None:
        """UploadError (shutting_down) once the server drains: it takes no new recording."""
        if self.jobs.draining:
            raise self._draining()

    def _admit(self, key: str) -> None:
        """Refuse, before its upload is read, what its job would be refused."""
        self.check_open()
        if not self.jobs.has_room():
            raise self._busy(self.jobs.retry_after_s())
        self._check_key(key)

    def could_start(self, key: str) -> bool:
        """Whether a job of ``key`` would start now (a queued job's turn)."""
        return self.jobs.has_room() and self._under_limit(key)

    def _under_limit(self, key: str) -> bool:
        per_key = self.max_jobs_per_key
        return per_key is None or key == ANONYMOUS or self._per_key[key] < per_key

    def _check_key(self, key: str) -> None:
        per_key = self.max_jobs_per_key
        if not self._under_limit(key):
            raise UploadError(
                UploadCode.TOO_MANY_JOBS,
                f"this key has its limit of {per_key} recordings running",
                retry_after_s=self.jobs.retry_after_s(),
            )

    def _busy(self, retry_after_s: int) -> UploadError:
        return UploadError(
            UploadCode.SERVER_BUSY,
            f"the server is transcribing its limit of {self.jobs.limits.max_jobs} recordings; "
            "try again later",
            retry_after_s=retry_after_s,
        )

    @staticmethod
    def _draining() -> UploadError:
        return UploadError(UploadCode.SHUTTING_DOWN, "the server is shutting down")

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
        span: Span = WHOLE,
    ) -> list[FileTranscript]:
        """As ``transcribe``, each channel of the file a recording of its own (``apart``),
        one after the other in the one job; ``raw``: what a headerless body is; ``span``:
        the part of it to transcribe (timed in the whole file)."""
        outcome = "done"
        try:
            self.check_request(request)
            self._check_key(key)  # the slot below checks the room and the drain
            try:
                with self.jobs.slot():
                    self._per_key[key] += 1
                    self.metrics.files_running.inc()
                    try:
                        return await self._run(path, request, on_text, apart, raw, span)
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
                raise self._busy(busy.retry_after_s) from None
            except Draining:
                raise self._draining() from None
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

    def check_request(self, request: FileRequest) -> None:
        """UploadError for what the model or the server cannot do of ``request``."""
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
        span: Span,
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
        heard = len(channels[0]) / SAMPLE_RATE  # every channel's length (decoding refuses none)
        if span.start_s >= heard:
            raise UploadError(
                UploadCode.BAD_REQUEST,
                f"the part asked for begins at {span.start_s:g} s, past the recording's "
                f"end ({heard:.3f} s)",
            )
        return [
            shifted(await self._transcribed(span.of(audio), request, on_text), span.start_s)
            for audio in channels
        ]

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
