"""The streaming WebSocket endpoint: one coroutine owns each connection.

Every streaming path (/v1/stream, and the compatible ones) is served here, each by its
dialect (transport/dialect.py). The endpoint admits or refuses the client
(``Admission``), opens its session (``SessionOpener``) and hands it to the
``SessionLoop``, which serves it on this connection and any that resumes it. Every
refusal and failure ends with an error in the dialect's form and the close code
protocol.md gives it (or, for dialects that refuse at the handshake, an HTTP error). A
drain (SIGTERM) or the session's maximum duration stops the reading, and the session
ends as after the client's end of stream: all audio received gets its final.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from websockets.http11 import Request

from parley.runtime.capacity import LiveCapacity, LiveLoad
from parley.runtime.metrics import Metrics
from parley.sessions.streams import AsrService, StreamFactory
from parley.transport.admission import Admission, Refused, StreamLimits
from parley.transport.auth import ANONYMOUS
from parley.transport.client_reader import ClientReader
from parley.transport.connection import Connection
from parley.transport.dialect import Dialect, Setup, query_of
from parley.transport.handshake import HandshakeCheck
from parley.transport.lifecycle import Lifecycle
from parley.transport.live_sessions import LiveSessions
from parley.transport.session_loop import Served, SessionLoop
from parley.transport.session_opener import SessionOpener
from parley.transport.sinks import SinkFactory

log = logging.getLogger(__name__)


class StreamEndpoint:
    """Serves the dialects' paths; counts live sessions for admission (no per-session
    state here)."""

    def __init__(
        self,
        asr: AsrService,
        streams: StreamFactory,
        limits: StreamLimits,
        admission: Admission,
        metrics: Metrics,
        dialects: list[Dialect[Any]],
        sinks: Sequence[SinkFactory] = (),
        server_name: str | None = None,
        capacity: LiveCapacity | None = None,
    ):
        self.capacity = capacity
        self._dialects = {dialect.path: dialect for dialect in dialects}
        self._admission = admission
        self._metrics = metrics
        self._live = LiveSessions()
        self._lifecycle = Lifecycle()
        reader = ClientReader(limits, self._lifecycle, metrics, capacity)
        self._loop = SessionLoop(
            limits, self._lifecycle, self._admission, metrics, reader, self.dialect_of
        )
        self._opener = SessionOpener(asr, streams, limits, sinks, self._loop.register, server_name)
        # For dialects that refuse at the handshake: their HTTP refusal, or None to go on.
        self.check_handshake = HandshakeCheck(self.dialect_of, self._admit, metrics)

    @property
    def paths(self) -> frozenset[str]:
        """The WebSocket paths, one per dialect (Wyoming's TCP port has none)."""
        return frozenset(path for path in self._dialects if path.startswith("/"))

    def dialect_of(self, request: Request) -> Dialect[Any]:
        """The dialect that serves the request's path."""
        return self._dialects[urlsplit(request.path).path]

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
        """How many sessions are being served now."""
        return len(self._live)

    @property
    def draining(self) -> bool:
        """Whether a drain (or shutdown) has begun: nothing new is admitted."""
        return self._lifecycle.draining.is_set()

    def load(self) -> LiveLoad:
        """The live streams: a meeting's participants count one each."""
        return self._live.load()

    async def drain(self, timeout_s: float) -> None:
        """Admit no one; end every live session as after ``end_of_stream`` (each gets the
        finals of all the audio it sent, then ``session_ended``, then close 1001); after
        ``timeout_s`` end whatever is left with ``shutting_down``."""
        self._lifecycle.draining.set()
        if len(self._live):
            log.info("draining %d session(s), for at most %g s", len(self._live), timeout_s)
        await self._live.wait(timeout_s)
        await self.shutdown()

    async def shutdown(self) -> None:
        """End every live session now with ``shutting_down``, and wait for their handlers."""
        self._lifecycle.draining.set()
        self._lifecycle.shutting_down = True
        await self._live.cancel()

    async def handle(self, connection: Connection) -> None:
        """Serve one connection on a streaming path: a new session, or a resumed one."""
        task = asyncio.current_task()
        assert task is not None and connection.request is not None
        this = Served(uuid.uuid4().hex, ANONYMOUS)
        dialect = self.dialect_of(connection.request)
        params = query_of(connection.request)
        if "resume" in params:
            await self._loop.resume(connection, dialect, params, this)
            return
        try:
            setup, this.key = self._admit(connection.request, dialect)
        except Refused as refusal:
            this.outcome = refusal.error.code.value
            await self._loop.close_with(connection, this, refusal.error)
            log.info(
                "refused a session: %s",
                this.outcome,
                extra={"outcome": this.outcome, "key": this.key},
            )
            return
        self._admission.opened(this.key)
        self._metrics.sessions_live.inc()
        session = self._opener.open(this, dialect, setup)
        try:
            with self._live.serving(task, session):
                await self._loop.serve(connection, session, this)
        finally:
            self._admission.closed(this.key)
            self._metrics.sessions_live.dec()
            self._opener.closed(this, session)

    def _admit(self, request: Request, dialect: Dialect[Any]) -> tuple[Setup[Any], str]:
        live = self._live
        return self._admission.admit(request, dialect, live.load(), len(live), self.draining)
