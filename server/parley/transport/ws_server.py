"""The /v1/stream WebSocket endpoint: one coroutine owns each connection.

Reads the stream's settings from the query string, admits or refuses the client,
then runs two tasks that start and stop together: a reader (client → session) and
a writer (session → client). Every refusal and failure ends with an ``error``
message and the close code protocol.md gives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import uuid
from dataclasses import dataclass
from typing import Callable
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from parley.protocol.messages import (ControlType, Error, ErrorCode, ProtocolError,
                                      SessionStarted, StreamConfig, encode, parse_control)
from parley.runtime.scheduler import AsrScheduler
from parley.runtime.diarization import DiarizationWorker
from parley.runtime.session import Session, SessionOptions
from parley.runtime.speaker_track import SpeakerTrack

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamLimits:
    max_sessions: int
    max_frame_bytes: int
    idle_timeout_s: float
    max_segment_s: float
    diarization_latency_s: float | None = None

    def to_json(self) -> dict:
        limits = {"max_frame_bytes": self.max_frame_bytes, "idle_timeout_s": self.idle_timeout_s,
                  "max_segment_s": self.max_segment_s}
        if self.diarization_latency_s is not None:
            limits["diarization_latency_s"] = self.diarization_latency_s
        return limits


@dataclass(frozen=True)
class AsrService:
    """What the transport may know of ASR: the worker, a label and a language check."""

    worker: AsrScheduler
    model_label: str
    check_language: Callable[[str | None], None]


class _Fatal(Exception):
    def __init__(self, error: Error):
        super().__init__(error.message)
        self.error = error


class StreamEndpoint:
    """Serves /v1/stream; counts live sessions for admission (no per-session state here)."""

    def __init__(self, asr: AsrService, options: SessionOptions, limits: StreamLimits,
                 token: str | None, diarization: DiarizationWorker | None = None):
        self._asr = asr
        self._diarization = diarization
        self._options = options
        self._limits = limits
        self._token = token
        self._live: set[asyncio.Task] = set()
        self._shutting_down = False

    @property
    def live_sessions(self) -> int:
        return len(self._live)

    async def shutdown(self) -> None:
        """Tell every live client the server is going away, and wait for their handlers."""
        self._shutting_down = True
        for task in list(self._live):
            task.cancel()
        await asyncio.gather(*self._live, return_exceptions=True)

    async def handle(self, connection: ServerConnection) -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            config = self._admit(connection)
        except _Fatal as refusal:
            await _close_with(connection, refusal.error)
            return
        self._live.add(task)
        speakers = SpeakerTrack(self._diarization) if config.diarization else None
        session = Session(config, self._asr.worker, self._options, speakers)
        session_id = uuid.uuid4().hex
        log.info("session %s started: %s", session_id, config)
        try:
            await connection.send(encode(SessionStarted(
                session_id, config, self._limits.to_json(), self._asr.model_label)))
            await self._run(connection, session)
        except _Fatal as fatal:
            await _close_with(connection, fatal.error)
        except asyncio.CancelledError:
            if self._shutting_down:
                await _close_with(connection, Error(ErrorCode.SHUTTING_DOWN,
                                                    "the server is shutting down"))
            else:
                raise
        except ConnectionClosed:
            pass
        except Exception:
            log.exception("session %s failed", session_id)
            await _close_with(connection, Error(ErrorCode.INTERNAL_ERROR,
                                                "internal server error; the session ended"))
        finally:
            session.close()
            self._live.discard(task)
            log.info("session %s ended", session_id)

    # ------------------------------------------------------------------ admission

    def _admit(self, connection: ServerConnection) -> StreamConfig:
        request = connection.request
        assert request is not None
        params = dict(parse_qsl(urlsplit(request.path).query, keep_blank_values=True))
        if self._token is not None and not self._authorized(params, request.headers):
            raise _Fatal(Error(ErrorCode.UNAUTHORIZED, "a valid token is required"))
        if self._shutting_down:
            raise _Fatal(Error(ErrorCode.SHUTTING_DOWN, "the server is shutting down"))
        if len(self._live) >= self._limits.max_sessions:
            raise _Fatal(Error(ErrorCode.SERVER_BUSY,
                               f"the server is at its limit of {self._limits.max_sessions} "
                               "sessions; try again later"))
        try:
            config = StreamConfig.from_query(params)
            self._asr.check_language(config.language)
        except ProtocolError as exc:
            raise _Fatal(Error(exc.code, exc.message)) from None
        except ValueError as exc:
            raise _Fatal(Error(ErrorCode.BAD_CONFIG, str(exc))) from None
        if config.diarization and self._diarization is None:
            raise _Fatal(Error(ErrorCode.BAD_CONFIG,
                               "diarization is not available on this server (start it with "
                               "--diarization bundle)"))
        return config

    def _authorized(self, params: dict[str, str], headers) -> bool:
        assert self._token is not None
        offered = params.get("token")
        authorization = headers.get("Authorization", "")
        if offered is None and authorization.lower().startswith("bearer "):
            offered = authorization[7:].strip()
        return offered is not None and hmac.compare_digest(offered.encode(), self._token.encode())

    # ------------------------------------------------------------------ the stream

    async def _run(self, connection: ServerConnection, session: Session) -> None:
        writer = asyncio.create_task(self._write(connection, session))
        reader = asyncio.create_task(self._read(connection, session))
        try:
            await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_EXCEPTION)
            for task in (reader, writer):
                if task.done() and task.exception() is not None:
                    raise task.exception()
            # The reader saw end_of_stream (or the writer ended first): the writer
            # finishes after session_ended.
            await writer
        finally:
            for task in (reader, writer):
                task.cancel()
            await asyncio.gather(reader, writer, return_exceptions=True)
        await connection.close(1000, "end of stream")

    async def _write(self, connection: ServerConnection, session: Session) -> None:
        async for message in session.messages():
            await connection.send(encode(message))

    async def _read(self, connection: ServerConnection, session: Session) -> None:
        while True:
            try:
                async with asyncio.timeout(self._limits.idle_timeout_s):
                    message = await connection.recv()
            except TimeoutError:
                raise _Fatal(Error(ErrorCode.IDLE_TIMEOUT,
                                   f"no audio or keep_alive for {self._limits.idle_timeout_s:g} s"
                                   )) from None
            try:
                if isinstance(message, bytes):
                    if len(message) > self._limits.max_frame_bytes:
                        raise _Fatal(Error(ErrorCode.FRAME_TOO_LARGE,
                                           f"audio message of {len(message)} bytes exceeds "
                                           f"{self._limits.max_frame_bytes}"))
                    await session.feed(message)
                    continue
                kind = parse_control(message)
            except ProtocolError as exc:
                await session.report(Error(exc.code, exc.message))
                continue
            if kind is ControlType.FINALIZE:
                await session.finalize()
            elif kind is ControlType.END_OF_STREAM:
                await session.end()
                return


async def _close_with(connection: ServerConnection, error: Error) -> None:
    """Send ``error`` and close with its code; the client may already be gone."""
    with contextlib.suppress(ConnectionClosed):
        await connection.send(encode(error))
    close_code = error.code.close_code or 1011
    with contextlib.suppress(ConnectionClosed):
        await connection.close(close_code, error.message[:120])
