"""Serving one session across its connections: the first, and each that resumes it.

A session outlives a dropped connection by the resume window (protocol.md section 6a):
its messages keep going into its ``SentLog`` (and its sinks) while no client reads
them, and a connection that resumes it gets the ones it missed. On each connection two
tasks run together, a reader (client → session, ``ClientReader``) and a writer (the
log → client); a third waits for another connection taking the session over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request

from parley.protocol.errors import CloseCode, close_reason
from parley.protocol.messages import EndReason, Error, ErrorCode
from parley.runtime.metrics import Metrics
from parley.sessions.streams import Stream
from parley.transport.admission import Admission, Refused, StreamLimits
from parley.transport.client_reader import ClientReader
from parley.transport.connection import Connection
from parley.transport.dialect import Dialect, Translator
from parley.transport.lifecycle import Lifecycle
from parley.transport.native import NativeTranslator
from parley.transport.resume import REPLAY_KEEP, Handoff, Resumes, SentLog, dropped, resume_point
from parley.transport.sinks import SessionSinks

log = logging.getLogger(__name__)


@dataclass
class Served:
    """What one session's coroutine knows about itself, for its sinks and log line."""

    session_id: str
    key: str
    translator: Translator | None = None  # once admitted
    sinks: SessionSinks | None = None  # once admitted: followers, webhooks, metrics
    outcome: str = "disconnected"
    error_codes: list[str] = field(default_factory=list)
    resume_token: str | None = None  # a resumable session's (protocol.md section 6a)
    ends_at: float = 0.0  # loop time at which the session reaches max_session_s
    input_ended: bool = False  # the session was ended (its reader is done for good)


class SessionLoop:
    """Shared by every session of the endpoint (no per-session state)."""

    def __init__(
        self,
        limits: StreamLimits,
        lifecycle: Lifecycle,
        admission: Admission,
        metrics: Metrics,
        reader: ClientReader,
        dialect_of: Callable[[Request], Dialect],
    ):
        self._limits = limits
        self._lifecycle = lifecycle
        self._admission = admission
        self._metrics = metrics
        self._reader = reader
        self.dialect_of = dialect_of
        self._resumes = Resumes()

    def register(self, key: str, session_id: str) -> str:
        """A resume token for a new resumable session."""
        return self._resumes.register(key, session_id)

    async def serve(self, first: Connection, session: Stream, this: Served) -> None:
        """Serve the session on its first connection and, if that one is lost, on each
        connection that resumes it within the window; or end it as after end_of_stream
        once no one does."""
        sent = SentLog()
        pump = asyncio.create_task(self._pump(session, this, sent))
        this.ends_at = asyncio.get_running_loop().time() + self._limits.max_session_s
        connection, after, handoff = first, None, None
        try:
            while True:
                kept = await self._serve(connection, session, this, sent, pump, after)
                if handoff is not None:
                    handoff.done.set_result(None)  # its handler may return now
                    handoff = None
                if not kept or this.resume_token is None:
                    return
                handoff = (
                    kept
                    if isinstance(kept, Handoff)
                    else await self._await_resume(session, this, sent, pump)
                )
                if handoff is None:
                    return
                connection, after = handoff.connection, handoff.last_seq
        finally:
            if handoff is not None and not handoff.done.done():
                handoff.done.set_result(None)
            if this.resume_token is not None:
                await self._refuse_late(self._resumes.forget(this.resume_token), this)
            pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)

    async def _await_resume(
        self, session: Stream, this: Served, sent: SentLog, pump: asyncio.Task
    ) -> Handoff | None:
        """The connection that resumes the session within the window; None if none
        does (or the server drains): the session then ends as after end_of_stream, and
        its finals still go to its webhooks and followers."""
        assert this.resume_token is not None
        log.info(
            "session %s lost its connection; resumable for %g s",
            this.session_id,
            self._limits.resume_window_s,
            extra={"session_id": this.session_id},
        )
        coming = asyncio.ensure_future(self._resumes.next_handoff(this.resume_token))
        drain = asyncio.ensure_future(self._lifecycle.draining.wait())
        try:
            await asyncio.wait(
                {coming, drain},
                timeout=self._limits.resume_window_s,
                return_when=asyncio.FIRST_COMPLETED,
            )
        except asyncio.CancelledError:
            if not self._lifecycle.shutting_down:
                raise
            coming.cancel()  # stopped, not drained, with nobody connected to be told
            this.outcome = ErrorCode.SHUTTING_DOWN.value
            return None
        finally:
            drain.cancel()
        if coming.done() and not self._lifecycle.draining.is_set():
            return coming.result()
        coming.cancel()
        await asyncio.gather(coming, return_exceptions=True)
        late = self._resumes.forget(this.resume_token)
        if coming.done() and not coming.cancelled():  # came with the drain: not taken
            late.append(coming.result())
        await self._refuse_late(late, this)
        sent.leave_unattended()
        if not this.input_ended:
            this.input_ended = True
            await session.end(
                EndReason.SHUTTING_DOWN
                if self._lifecycle.draining.is_set()
                else EndReason.END_OF_STREAM
            )
        await asyncio.gather(pump, return_exceptions=True)
        this.outcome = "disconnected"  # and it did not come back
        return None

    async def _refuse_late(self, late: list[Handoff], this: Served) -> None:
        """Resumes that came as the session ended: refused, as after it."""
        for handoff in late:
            code = (
                ErrorCode.SHUTTING_DOWN
                if self._lifecycle.draining.is_set()
                else ErrorCode.NOT_FOUND
            )
            await self.close_with(
                handoff.connection,
                Served(this.session_id, this.key),
                Error(code, "the session ended as this connection came to resume it"),
            )
            handoff.done.set_result(None)

    async def resume(
        self, connection: Connection, dialect: Dialect, params: Mapping[str, str], this: Served
    ) -> None:
        """A connection with ``resume``: hand it to its session's coroutine, and wait
        until that is done with it; or refuse it."""
        assert connection.request is not None
        try:
            key = self._admission.identify(connection.request, dialect, params, resuming=True)
            if self._lifecycle.draining.is_set():
                raise Refused(Error(ErrorCode.SHUTTING_DOWN, "the server is shutting down"))
            last_seq = resume_point(dialect, params)
            handoff = Handoff(connection, last_seq)
            self._resumes.claim(params["resume"], key, handoff)
        except Refused as refusal:
            await self.close_with(connection, this, refusal.error)
            log.info(
                "refused a resume: %s",
                refusal.error.code.value,
                extra={"outcome": refusal.error.code.value},
            )
            return
        await handoff.done

    async def _serve(
        self,
        connection: Connection,
        session: Stream,
        this: Served,
        sent: SentLog,
        pump: asyncio.Task,
        after: int | None,
    ) -> bool | Handoff:
        """Stream on one connection until the session ends (False) or the connection is
        lost with the session still to finish (True), or another connection takes the
        session over (that connection's Handoff). ``after``: None for the session's
        first connection, else the last message its client got."""
        assert this.translator is not None
        try:
            if after is None:
                for text in this.translator.opening():
                    await connection.send(text)
            else:
                if not sent.can_replay_after(after):
                    too_old = Error(
                        ErrorCode.NOT_FOUND,
                        f"cannot resume after message "
                        f"{after}: the session has sent {sent.last_seq} and keeps "
                        f"the last {REPLAY_KEEP}",
                    )
                    # That connection's error, not the session's: it may yet be resumed.
                    await self.close_with(connection, Served(this.session_id, this.key), too_old)
                    return True
                assert isinstance(this.translator, NativeTranslator)  # the resumable wire
                await connection.send(this.translator.resumed(sent.last_seq))
            ending = await self._run(connection, session, this, sent, after or 0)
            if isinstance(ending, Handoff):
                with contextlib.suppress(ConnectionClosed):
                    await connection.close(
                        CloseCode.TAKEN_OVER, "the session was resumed on another connection"
                    )
                return ending
            this.outcome = "ended"
            await connection.close(ending.close_code, ending.close_reason)
            return False
        except Refused as fatal:
            this.outcome = fatal.error.code.value
            await self.close_with(connection, this, fatal.error)
            return False
        except asyncio.CancelledError:
            if not self._lifecycle.shutting_down:
                raise
            if this.outcome == "ended":
                return False  # stopped while closing a session that had ended: it stays ended
            this.outcome = ErrorCode.SHUTTING_DOWN.value
            await self.close_with(
                connection, this, Error(ErrorCode.SHUTTING_DOWN, "the server is shutting down")
            )
            return False
        except ConnectionClosed as closed:
            # A client that closed the connection meant to; one that dropped it (no close
            # frame) gets its session kept, if it may still be owed something.
            return dropped(closed) and not (pump.done() and sent.sent_seq == sent.last_seq)
        except Exception:
            log.exception("session %s failed", this.session_id)
            this.outcome = ErrorCode.INTERNAL_ERROR.value
            await self.close_with(
                connection,
                this,
                Error(ErrorCode.INTERNAL_ERROR, "internal server error; the session ended"),
            )
            return False

    async def _run(
        self, connection: Connection, session: Stream, this: Served, sent: SentLog, after: int
    ) -> EndReason | Handoff:
        """Stream until the session ends (why), or another connection takes it over (its
        Handoff); fatal errors raise Refused, a lost connection ConnectionClosed."""
        assert this.translator is not None
        writer = asyncio.create_task(self._write(connection, sent, after))
        tasks: set[asyncio.Task[Any]] = {writer}
        reader = None
        if not this.input_ended:
            reader = asyncio.create_task(
                self._reader.read(connection, session, this.translator, this.ends_at)
            )
            tasks.add(reader)
        takeover = None
        if this.resume_token is not None:
            takeover = asyncio.create_task(self._resumes.next_handoff(this.resume_token))
            tasks.add(takeover)
        ending = EndReason.END_OF_STREAM
        try:
            while True:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task is not takeover and (error := task.exception()) is not None:
                        raise error
                if takeover in done:
                    handoff, takeover = takeover.result(), None
                    return handoff
                if reader in done:  # the session was ended: the writer sends the rest
                    this.input_ended = True
                    ending = reader.result()
                    tasks.discard(reader)
                if writer in done:  # session_ended was sent
                    return ending
        finally:
            for running in (reader, writer, takeover):
                if running is not None:
                    running.cancel()
            await asyncio.gather(
                *(t for t in (reader, writer, takeover) if t is not None), return_exceptions=True
            )
            if takeover is not None and takeover.done() and not takeover.cancelled():
                # A resume came as this connection failed: it is the next one's.
                assert this.resume_token is not None
                self._resumes.give_back(this.resume_token, takeover.result())

    async def _write(self, connection: Connection, sent: SentLog, after: int) -> None:
        async for seq, text in sent.after(after):
            await connection.send(text)
            sent.sent(seq)

    async def _pump(self, session: Stream, this: Served, sent: SentLog) -> None:
        """The session's messages, told to followers, webhooks and metrics as they come
        (whether or not a client is connected), and put in its log for the client."""
        assert this.translator is not None and this.sinks is not None
        async for message in session.messages():
            if isinstance(message, Error):
                this.error_codes.append(message.code.value)
            this.sinks.message(message)
            for text in this.translator.outbound(message):
                await sent.append(text)
        sent.finish()

    async def close_with(self, connection: Connection, this: Served, error: Error) -> None:
        """Send ``error`` and close with its code; the client may already be gone."""
        self._metrics.errors.labels(error.code.value).inc()  # even if the client is gone
        this.error_codes.append(error.code.value)
        assert connection.request is not None
        with contextlib.suppress(ConnectionClosed):
            await connection.send(self.dialect_of(connection.request).error(error))
        close_code = error.code.close_code or CloseCode.INTERNAL_ERROR
        with contextlib.suppress(ConnectionClosed):
            await connection.close(close_code, close_reason(error.message))
