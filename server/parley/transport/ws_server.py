"""The streaming WebSocket endpoint: one coroutine owns each connection.

Every streaming path (/v1/stream, and the compatible ones) is served here; the path's
dialect (transport/dialect.py) reads the stream's settings and translates messages.
The endpoint admits or refuses the client (``Admission``, and the measured capacity),
builds its session (the ``StreamFactory`` it was given), tells the session's sinks,
and hands it to the ``SessionLoop``, which serves it on this connection and any that
resumes it. Every refusal and failure ends with an error in the dialect's form and the
close code protocol.md gives it (or, for dialects that refuse at the handshake, an
HTTP error). A drain (SIGTERM) or the session's maximum duration stops the reading,
and the session ends as after the client's end of stream: every piece of audio
already received gets its final.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from websockets.http11 import Request, Response

from parley.protocol.messages import (
    Error,
    ErrorCode,
)
from parley.runtime.capacity import LiveCapacity, LiveLoad
from parley.runtime.metrics import Metrics
from parley.runtime.session_group import SessionGroup
from parley.runtime.streams import AsrService, StreamFactory
from parley.transport.admission import Access, Admission, Refused, StreamLimits
from parley.transport.client_reader import ClientReader
from parley.transport.connection import Connection
from parley.transport.dialect import ANONYMOUS, Dialect, Opened, Setup, Stream, query_of
from parley.transport.lifecycle import Lifecycle
from parley.transport.session_loop import Served, SessionLoop
from parley.transport.sinks import SessionClosed, SessionOpened, SessionSinks, SinkFactory

log = logging.getLogger(__name__)
# Told to HTTP clients refused as busy: about the span over which the load is measured.
BUSY_RETRY_AFTER_S = 10


class StreamEndpoint:
    """Serves the dialects' paths; counts live sessions for admission (no per-session
    state here)."""

    def __init__(
        self,
        asr: AsrService,
        streams: StreamFactory,
        limits: StreamLimits,
        access: Access,
        metrics: Metrics,
        dialects: list[Dialect],
        sinks: Sequence[SinkFactory] = (),
        allows_webhook: Callable[[str], bool] = lambda url: False,
        server_name: str | None = None,
        capacity: LiveCapacity | None = None,
    ):
        self._server_name = server_name
        self.capacity = capacity
        self._dialects = {dialect.path: dialect for dialect in dialects}
        self._asr = asr
        self._streams_of = streams
        self._sinks = sinks
        self._limits = limits
        self._admission = Admission(
            access, limits, asr.check_decoding, streams.diarization is not None, allows_webhook
        )
        self._metrics = metrics
        self._live: set[asyncio.Task] = set()
        self._streams: dict[asyncio.Task, Stream] = {}  # the live ones, for their load
        self._lifecycle = Lifecycle()
        reader = ClientReader(limits, self._lifecycle, metrics, capacity)
        self._loop = SessionLoop(
            limits, self._lifecycle, self._admission, metrics, reader, self.dialect_of
        )

    @property
    def paths(self) -> frozenset[str]:
        return frozenset(self._dialects)

    def dialect_of(self, request: Request) -> Dialect:
        return self._dialects[urlsplit(request.path).path]

    def check_handshake(self, request: Request) -> Response | None:
        """For dialects that refuse at the handshake: their HTTP refusal, or None to go on
        (the handler admits again: the server may fill up in between)."""
        dialect = self.dialect_of(request)
        if not dialect.refuses_at_handshake:
            return None
        try:
            self._admit(request, dialect)
        except Refused as refusal:
            self._metrics.sessions.labels(refusal.error.code.value).inc()
            log.info(
                "refused a session at the handshake: %s",
                refusal.error.code.value,
                extra={"outcome": refusal.error.code.value},
            )
            response = dialect.refusal(refusal.error)
            if refusal.error.code in (ErrorCode.SERVER_BUSY, ErrorCode.SHUTTING_DOWN):
                response.headers["Retry-After"] = str(BUSY_RETRY_AFTER_S)
            return response
        return None

    def subprotocol(self, request: Request, offered: list[str]) -> str | None:
        """The subprotocol the path's dialect answers with, of those the client offered."""
        dialect = self._dialects.get(urlsplit(request.path).path)
        return dialect.subprotocol(offered) if dialect is not None else None

    def select_subprotocol(self, connection: Connection, offered) -> str | None:
        """websockets' hook for ``subprotocol``."""
        assert connection.request is not None
        return self.subprotocol(connection.request, list(offered))

    @property
    def live_sessions(self) -> int:
        return len(self._live)

    @property
    def draining(self) -> bool:
        return self._lifecycle.draining.is_set()

    async def drain(self, timeout_s: float) -> None:
        """Admit no one; end every live session as after ``end_of_stream`` (each gets the
        finals of all the audio it sent, then ``session_ended``, then close 1001); after
        ``timeout_s`` end whatever is left with ``shutting_down``."""
        self._lifecycle.draining.set()
        if self._live:
            log.info("draining %d session(s), for at most %g s", len(self._live), timeout_s)
            await asyncio.wait(set(self._live), timeout=timeout_s)
        await self.shutdown()

    async def shutdown(self) -> None:
        """End every live session now with ``shutting_down``, and wait for their handlers."""
        self._lifecycle.draining.set()
        self._lifecycle.shutting_down = True
        for task in list(self._live):
            task.cancel()
        await asyncio.gather(*self._live, return_exceptions=True)

    async def handle(self, connection: Connection) -> None:
        task = asyncio.current_task()
        assert task is not None
        this = Served(uuid.uuid4().hex, ANONYMOUS)
        request = connection.request
        assert request is not None
        dialect = self.dialect_of(request)
        params = query_of(request)
        if "resume" in params:
            await self._loop.resume(connection, dialect, params, this)
            return
        try:
            setup, this.key = self._admit(request, dialect)
        except Refused as refusal:
            this.outcome = refusal.error.code.value
            await self._loop.close_with(connection, this, refusal.error)
            log.info(
                "refused a session: %s",
                refusal.error.code.value,
                extra={"outcome": this.outcome, "key": this.key},
            )
            return
        self._live.add(task)
        self._admission.opened(this.key)
        self._metrics.sessions_live.inc()
        session = self._open(this, dialect, setup)
        self._streams[task] = session
        try:
            await self._loop.serve(connection, session, this)
        finally:
            self._live.discard(task)
            self._streams.pop(task, None)
            self._admission.closed(this.key)
            self._metrics.sessions_live.dec()
            self._closed(this, session)

    def _open(self, this: Served, dialect: Dialect, setup: Setup) -> Stream:
        """An admitted connection's session, translator, followers and webhook feed."""
        session = self._streams_of(setup.config, setup.vad, setup.tracks)
        if dialect.resumable and self._limits.resume_window_s > 0:
            this.resume_token = self._loop.register(this.key, this.session_id)
        this.translator = dialect.translator(
            Opened(
                this.session_id,
                setup,
                self._asr.model_label,
                self._limits.to_json(),
                self._asr.check_decoding,
                self._server_name,
                this.resume_token,
                self._asr.languages,
            )
        )
        log.info(
            "session %s started by key %s on %s: %s",
            this.session_id,
            this.key,
            dialect.path,
            setup.config,
            extra={"session_id": this.session_id, "key": this.key},
        )
        opened = SessionOpened(
            this.session_id,
            this.key,
            dialect.path,
            setup.config,
            self._asr.model_label,
            setup.webhook_url,
        )
        this.sinks = SessionSinks(self._sinks, opened)
        return session

    def _closed(self, this: Served, session: Stream) -> None:
        """A session's end, told to its sinks and the log."""
        session.close()
        audio_s = round(session.stream_time, 3)
        if this.sinks is not None:
            this.sinks.closed(SessionClosed(this.outcome, audio_s, tuple(this.error_codes)))
        log.info(
            "session %s ended: %s after %.1f s of audio (key %s, errors %s)",
            this.session_id,
            this.outcome,
            audio_s,
            this.key,
            ",".join(this.error_codes) or "none",
            extra={
                "session_id": this.session_id,
                "key": this.key,
                "outcome": this.outcome,
                "audio_s": audio_s,
                "error_codes": this.error_codes,
            },
        )

    def _admit(self, request: Request, dialect: Dialect) -> tuple[Setup, str]:
        setup, key = self._admission.admit(
            request, dialect, len(self._live), self._lifecycle.draining.is_set()
        )
        if self.capacity is not None:
            why = self.capacity.refusal(self.load(), setup.config.diarization)
            if why is not None:
                raise Refused(Error(ErrorCode.SERVER_BUSY, why))
        return setup, key

    def load(self) -> LiveLoad:
        """The live streams: a meeting's participants count one each."""
        streams = diarized = 0
        for stream in self._streams.values():
            streams += max(1, len(stream.tracks)) if isinstance(stream, SessionGroup) else 1
            diarized += stream.config.diarization
        return LiveLoad(streams, diarized)

    # ------------------------------------------------------------------ the stream
