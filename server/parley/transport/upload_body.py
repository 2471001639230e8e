"""How an upload's bytes arrive (protocol.md section 16, "Limits and errors").

An upload streams to an anonymous temporary file of ours as it arrives, never whole
into memory; the client's file name is never used for anything. Three bounds hold
while it arrives:
- its size, ``files.max_upload_mb`` (a Content-Length over it is refused before
  reading);
- the wait for its next bytes, ``server.idle_timeout_s``, the live wire's idle bound.
  uvicorn bounds neither a request's body nor the time between its chunks, so a
  client that stopped sending mid-body held its connection and its temporary file for
  ever;
- how many arrive at once, ``files.max_receiving``: each may be ``max_upload_mb`` of
  disk until its answer;
- its pace: past its first ``server.idle_timeout_s``, an upload must have come at
  ``MIN_BYTES_PER_S`` on average, or a client sending a byte every few seconds would
  hold one of those places for ever (Apache's mod_reqtimeout asks 500 bytes a second).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException
from starlette.requests import ClientDisconnect, Request

from parley.recordings.files import FileLimits
from parley.transport.form_parser import BoundedFormParser
from parley.transport.upload_errors import UploadCode, UploadError

MIN_BYTES_PER_S = 1024  # a 200 MiB upload at this pace would take 57 hours


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
class UploadReceiver:
    """Receives uploads within their bounds; ``UploadError`` past any of them."""

    max_bytes: int
    idle_timeout_s: float
    max_receiving: int
    retry_after_s: int  # what a client refused for want of room is told to wait

    def __post_init__(self) -> None:
        self._receiving = 0

    @classmethod
    def within(
        cls, limits: FileLimits, idle_timeout_s: float, retry_after_s: int
    ) -> UploadReceiver:
        """A receiver of uploads within ``limits``' size and number at once."""
        return cls(limits.max_bytes, idle_timeout_s, limits.max_receiving, retry_after_s)

    @property
    def receiving(self) -> int:
        """Uploads whose bodies are arriving now."""
        return self._receiving

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
        with self._slot():
            parser = BoundedFormParser(request.headers, self._chunks(request), max_files=4)
            try:
                data = await parser.parse()
            except MultiPartException as exc:
                raise UploadError(
                    UploadCode.BAD_REQUEST, f"malformed form: {exc.message}"
                ) from None
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
            with self._slot():
                async for chunk in self._chunks(request):
                    copy.write(chunk)
                copy.flush()
            yield Path(copy.name)

    @contextlib.contextmanager
    def _slot(self) -> Iterator[None]:
        if self._receiving >= self.max_receiving:
            raise UploadError(
                UploadCode.SERVER_BUSY,
                f"the server is receiving its limit of {self.max_receiving} uploads; "
                "try again later",
                retry_after_s=self.retry_after_s,
            )
        self._receiving += 1
        try:
            yield
        finally:
            self._receiving -= 1

    def _check_length(self, request: Request) -> None:
        length = request.headers.get("content-length")
        if (
            length is not None
            and length.isascii()
            and length.isdigit()
            and int(length) > self.max_bytes
        ):
            raise self._too_large()

    def _too_large(self) -> UploadError:
        return UploadError(
            UploadCode.TOO_LARGE, f"the upload exceeds {self.max_bytes / 2**20:g} MiB"
        )

    async def _chunks(self, request: Request) -> AsyncGenerator[bytes, None]:
        chunks = request.stream()
        received, started = 0, time.monotonic()
        while True:
            try:
                async with asyncio.timeout(self.idle_timeout_s):
                    chunk = await anext(chunks)
            except StopAsyncIteration:
                return
            except ClientDisconnect:
                raise UploadError(
                    UploadCode.CANCELLED, "the client left before its upload was in"
                ) from None
            except TimeoutError:
                raise UploadError(
                    UploadCode.IDLE_TIMEOUT,
                    f"no more of the upload arrived for {self.idle_timeout_s:g} s",
                ) from None
            received += len(chunk)
            if received > self.max_bytes:
                raise self._too_large()
            elapsed = time.monotonic() - started
            if elapsed > self.idle_timeout_s and received < MIN_BYTES_PER_S * elapsed:
                raise UploadError(
                    UploadCode.IDLE_TIMEOUT,
                    f"the upload arrived slower than {MIN_BYTES_PER_S} bytes a second",
                )
            yield chunk
