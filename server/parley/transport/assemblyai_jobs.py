"""What AssemblyAI's pre-recorded API keeps between requests, each bounded: the uploads
(files on disk, until a transcript has used one, or ``HELD_S`` unused) and the
transcript jobs (until read and ``KEPT_S`` after they finished, the newest
``MAX_TRANSCRIPTS``). Each belongs to the key that made it; another key is told it
does not exist. Nothing outlives the process, and each replica of a cluster keeps its
own (docs/deployment.md says where such clients go).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from parley.recordings.file_results import FileTranscript
from parley.transport.assemblyai_shapes import TranscriptAsk, completed
from parley.transport.upload_errors import UploadCode, UploadError

HELD_S = 3600.0  # an upload no transcript has used is dropped after this
KEPT_S = 3600.0  # a finished transcript is dropped this long after it finished
MAX_HELD = 64  # uploads on disk at once (waiting, or being transcribed)
MAX_TRANSCRIPTS = 256  # transcripts kept; past it the oldest finished one is dropped
# One key's share, so that one client cannot take every upload slot, nor push another
# key's transcripts out before they are read: past it, its own oldest finished goes.
MAX_PER_KEY = 16


class Status:
    """A transcript's ``status``, as AssemblyAI names them."""

    QUEUED = "queued"
    PROCESSING = "processing"
    COMPLETED = "completed"
    ERROR = "error"
    ALL = (QUEUED, PROCESSING, COMPLETED, ERROR)


@dataclass
class HeldUpload:
    """A recording received for a transcript, on disk under the jobs' own directory."""

    key: str
    path: Path
    size: int
    held_at: float
    taken: bool = False  # a transcript has it: it goes when that job ends


@dataclass
class TranscriptJob:
    """One transcript: what was asked, and where its job stands."""

    id: str
    key: str
    ask: TranscriptAsk
    upload: HeldUpload
    status: str = Status.QUEUED
    result: FileTranscript | None = None
    answer: dict[str, Any] | None = None  # the result's fields of the object, made once
    error: str | None = None
    finished_at: float | None = None
    created: str = field(default_factory=lambda: _now())  # ISO 8601, as listings say it
    completed: str | None = None

    @property
    def finished(self) -> bool:
        return self.finished_at is not None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def not_found(what: str) -> UploadError:
    return UploadError(UploadCode.NOT_FOUND, f"{what} not found")


class AssemblyJobs:
    """The held uploads and the transcript jobs of one server."""

    def __init__(self, max_bytes: int, clock: Callable[[], float] = time.monotonic):
        self._max_bytes = max_bytes  # of held uploads, together
        self._clock = clock
        # removed with the process (or this object), whatever happened to the jobs
        self._dir = tempfile.TemporaryDirectory(prefix="parley-assemblyai-")
        self._uploads: dict[str, HeldUpload] = {}
        self._transcripts: dict[str, TranscriptJob] = {}

    # ------------------------------------------------------------------ uploads

    def check_room(self, key: str) -> None:
        """UploadError (busy) when no upload of ``key`` could be held now: before one is
        read."""
        self._expire()
        waiting = sum(1 for u in self._uploads.values() if u.key == key and not u.taken)
        if len(self._uploads) >= MAX_HELD or waiting >= MAX_PER_KEY:
            limit = f"{MAX_HELD} uploads" if waiting < MAX_PER_KEY else f"{MAX_PER_KEY} of a key's"
            raise UploadError(
                UploadCode.SERVER_BUSY,
                f"the server holds its limit of {limit}; transcribe them first",
                retry_after_s=5,
            )

    def hold(self, key: str, received: Path) -> str:
        """Keep a received upload (``received`` is deleted by its receiver) for ``key``;
        its id. UploadError (busy) past the bounds."""
        self.check_room(key)
        size = received.stat().st_size
        if sum(u.size for u in self._uploads.values()) + size > self._max_bytes:
            raise UploadError(
                UploadCode.SERVER_BUSY,
                f"the server holds its limit of {self._max_bytes / 2**20:g} MiB of uploads",
                retry_after_s=5,
            )
        upload_id = uuid.uuid4().hex
        path = Path(self._dir.name) / upload_id
        try:
            os.link(received, path)  # no copy where the two share a file system
        except OSError:
            shutil.copyfile(received, path)
        self._uploads[upload_id] = HeldUpload(key, path, size, self._clock())
        return upload_id

    def _release(self, upload_id: str) -> None:
        upload = self._uploads.pop(upload_id, None)
        if upload is not None:
            upload.path.unlink(missing_ok=True)

    # ------------------------------------------------------------------ transcripts

    def add(self, key: str, ask: TranscriptAsk) -> TranscriptJob:
        """A new job for ``key`` on its upload, which it takes; UploadError when the
        upload is not this key's, or was used, or no more transcripts can be kept."""
        self._expire()
        upload = self._uploads.get(ask.upload_id)
        if upload is None or upload.key != key or upload.taken:
            raise UploadError(
                UploadCode.BAD_REQUEST,
                "audio_url names no upload of this key that is still held (each serves "
                f"one transcript, for at most {HELD_S:g} s)",
                "audio_url",
            )
        for of_key, limit in ((True, MAX_PER_KEY), (False, MAX_TRANSCRIPTS)):
            kept = [t for t in self._transcripts.values() if t.key == key or not of_key]
            if len(kept) < limit:
                continue
            finished = [t for t in kept if t.finished]
            if not finished:
                raise UploadError(
                    UploadCode.SERVER_BUSY,
                    f"{limit} transcripts are under way; ask again when one is done",
                    retry_after_s=5,
                )
            oldest = min(finished, key=lambda t: t.finished_at or 0.0)
            del self._transcripts[oldest.id]
        upload.taken = True
        job = TranscriptJob(uuid.uuid4().hex, key, ask, upload)
        self._transcripts[job.id] = job
        return job

    def get(self, key: str, transcript_id: str) -> TranscriptJob:
        """The job, if it is ``key``'s; UploadError (404) otherwise."""
        self._expire()
        job = self._transcripts.get(transcript_id)
        if job is None or job.key != key:
            raise not_found("transcript")
        return job

    def of_key(self, key: str) -> list[TranscriptJob]:
        """``key``'s transcripts, the newest first."""
        self._expire()
        return [t for t in reversed(self._transcripts.values()) if t.key == key]

    def delete(self, key: str, transcript_id: str) -> TranscriptJob:
        """Forget a finished job; UploadError while it is still under way."""
        job = self.get(key, transcript_id)
        if not job.finished:
            raise UploadError(
                UploadCode.BAD_REQUEST, "the transcript is still being processed; delete it after"
            )
        del self._transcripts[transcript_id]
        return job

    def finish(
        self,
        job: TranscriptJob,
        result: FileTranscript | None,
        error: str | None,
        channels: int = 1,
    ) -> None:
        """The job ended, with its result (heard on ``channels`` channels apart) or the
        error it is told; its upload goes."""
        job.status = Status.COMPLETED if result is not None else Status.ERROR
        job.result, job.error = result, error
        job.answer = completed(result, job.ask, channels) if result is not None else None
        job.finished_at, job.completed = self._clock(), _now()
        self._release(job.ask.upload_id)

    def _expire(self) -> None:
        now = self._clock()
        for upload_id, upload in list(self._uploads.items()):
            if not upload.taken and now - upload.held_at > HELD_S:
                self._release(upload_id)
        for transcript_id, job in list(self._transcripts.items()):
            if job.finished_at is not None and now - job.finished_at > KEPT_S:
                del self._transcripts[transcript_id]


def job_json(job: TranscriptJob) -> dict[str, Any]:
    """The transcript object: its id, status and error, the asked fields repeated, and
    the result's fields once done."""
    return {
        "id": job.id,
        "status": job.status,
        "error": job.error,
        **job.ask.echo,
        **(job.answer or {"text": None, "words": None, "utterances": None}),
    }
