"""The streaming WebSocket endpoint: one coroutine owns each connection.

Every streaming path (/v1/stream, and the compatible ones) is served here; the path's
dialect (transport/dialect.py) reads the stream's settings and translates messages.
The endpoint admits or refuses the client, then runs two tasks that start and stop
together: a reader (client → session) and a writer (session → client). Every refusal
and failure ends with an error in the dialect's form and the close code protocol.md
gives it (or, for dialects that refuse at the handshake, an HTTP error). A drain
(SIGTERM) or the session's maximum duration stops the reading, and the session ends
as after the client's end of stream: every piece of audio already received gets its
final.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from parley.protocol.errors import CloseCode, close_reason
from parley.protocol.messages import (
    EndReason,
    Error,
    ErrorCode,
    ProtocolError,
)
from parley.runtime.capacity import LiveCapacity, LiveLoad
from parley.runtime.metrics import Metrics
from parley.runtime.session_group import SessionGroup
from parley.runtime.streams import AsrService, StreamFactory
from parley.transport.admission import Access, Admission, Refused, StreamLimits
from parley.transport.connection import Connection
from parley.transport.dialect import ANONYMOUS, Dialect, Opened, Setup, Stream, Translator, query_of
from parley.transport.native import NativeTranslator
from parley.transport.resume import REPLAY_KEEP, Handoff, Resumes, SentLog, dropped, resume_point
from parley.transport.sinks import SessionClosed, SessionOpened, SessionSinks, SinkFactory

log = logging.getLogger(__name__)
# Told to HTTP clients refused as busy: about the span over which the load is measured.
BUSY_RETRY_AFTER_S = 10


@dataclass
class _Connection:
    """What one connection's coroutine knows about itself, for its log line."""

    session_id: str
    key: str
    translator: Translator | None = None  # once admitted
    sinks: SessionSinks | None = None  # once admitted: followers, webhooks, metrics
    outcome: str = "disconnected"
    error_codes: list[str] = field(default_factory=list)
    resume_token: str | None = None  # a resumable session's (protocol.md section 6a)
    ends_at: float = 0.0  # loop time at which the session reaches max_session_s
    input_ended: bool = False  # the session was ended (its reader is done for good)


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
        self._resumes = Resumes()
        self._streams: dict[asyncio.Task, Stream] = {}  # the live ones, for their load
        self._draining = asyncio.Event()
        self._shutting_down = False

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
        return self._draining.is_set()

    async def drain(self, timeout_s: float) -> None:
        """Admit no one; end every live session as after ``end_of_stream`` (each gets the
        finals of all the audio it sent, then ``session_ended``, then close 1001); after
        ``timeout_s`` end whatever is left with ``shutting_down``."""
        self._draining.set()
        if self._live:
            log.info("draining %d session(s), for at most %g s", len(self._live), timeout_s)
            await asyncio.wait(set(self._live), timeout=timeout_s)
        await self.shutdown()

    async def shutdown(self) -> None:
        """End every live session now with ``shutting_down``, and wait for their handlers."""
        self._draining.set()
        self._shutting_down = True
        for task in list(self._live):
            task.cancel()
        await asyncio.gather(*self._live, return_exceptions=True)

    async def handle(self, connection: Connection) -> None:
        task = asyncio.current_task()
        assert task is not None
        this = _Connection(uuid.uuid4().hex, ANONYMOUS)
        request = connection.request
        assert request is not None
        dialect = self.dialect_of(request)
        params = query_of(request)
        if "resume" in params:
            await self._resume(connection, dialect, params, this)
            return
        try:
            setup, this.key = self._admit(request, dialect)
        except Refused as refusal:
            this.outcome = refusal.error.code.value
            await self._close_with(connection, this, refusal.error)
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
            await self._serve_session(connection, session, this)
        finally:
            self._live.discard(task)
            self._streams.pop(task, None)
            self._admission.closed(this.key)
            self._metrics.sessions_live.dec()
            self._closed(this, session)

    def _open(self, this: _Connection, dialect: Dialect, setup: Setup) -> Stream:
        """An admitted connection's session, translator, followers and webhook feed."""
        session = self._streams_of(setup.config, setup.vad, setup.tracks)
        if dialect.resumable and self._limits.resume_window_s > 0:
            this.resume_token = self._resumes.register(this.key, this.session_id)
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

    async def _serve_session(self, first: Connection, session: Stream, this: _Connection) -> None:
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
        self, session: Stream, this: _Connection, sent: SentLog, pump: asyncio.Task
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
        drain = asyncio.ensure_future(self._draining.wait())
        try:
            await asyncio.wait(
                {coming, drain},
                timeout=self._limits.resume_window_s,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            drain.cancel()
        if coming.done() and not self._draining.is_set():
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
                EndReason.SHUTTING_DOWN if self._draining.is_set() else EndReason.END_OF_STREAM
            )
        await asyncio.gather(pump, return_exceptions=True)
        this.outcome = "disconnected"  # and it did not come back
        return None

    async def _refuse_late(self, late: list[Handoff], this: _Connection) -> None:
        """Resumes that came as the session ended: refused, as after it."""
        for handoff in late:
            code = ErrorCode.SHUTTING_DOWN if self._draining.is_set() else ErrorCode.NOT_FOUND
            await self._close_with(
                handoff.connection,
                _Connection(this.session_id, this.key),
                Error(code, "the session ended as this connection came to resume it"),
            )
            handoff.done.set_result(None)

    async def _resume(
        self, connection: Connection, dialect: Dialect, params: Mapping[str, str], this: _Connection
    ) -> None:
        """A connection with ``resume``: hand it to its session's coroutine, and wait
        until that is done with it; or refuse it."""
        assert connection.request is not None
        try:
            key = self._admission.identify(connection.request, dialect, params)
            if self._draining.is_set():
                raise Refused(Error(ErrorCode.SHUTTING_DOWN, "the server is shutting down"))
            last_seq = resume_point(dialect, params)
            handoff = Handoff(connection, last_seq)
            self._resumes.claim(params["resume"], key, handoff)
        except Refused as refusal:
            await self._close_with(connection, this, refusal.error)
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
        this: _Connection,
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
                    await self._close_with(
                        connection, _Connection(this.session_id, this.key), too_old
                    )
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
            await self._close_with(connection, this, fatal.error)
            return False
        except asyncio.CancelledError:
            if not self._shutting_down:
                raise
            if this.outcome == "ended":
                return False  # stopped while closing a session that had ended: it stays ended
            this.outcome = ErrorCode.SHUTTING_DOWN.value
            await self._close_with(
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
            await self._close_with(
                connection,
                this,
                Error(ErrorCode.INTERNAL_ERROR, "internal server error; the session ended"),
            )
            return False

    def _closed(self, this: _Connection, session: Stream) -> None:
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
            request, dialect, len(self._live), self._draining.is_set()
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

    async def _run(
        self, connection: Connection, session: Stream, this: _Connection, sent: SentLog, after: int
    ) -> EndReason | Handoff:
        """Stream until the session ends (why), or another connection takes it over (its
        Handoff); fatal errors raise Refused, a lost connection ConnectionClosed."""
        writer = asyncio.create_task(self._write(connection, sent, after))
        tasks: set[asyncio.Task[Any]] = {writer}
        reader = None
        if not this.input_ended:
            reader = asyncio.create_task(self._read(connection, session, this))
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

    async def _pump(self, session: Stream, this: _Connection, sent: SentLog) -> None:
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

    async def _read(self, connection: Connection, session: Stream, this: _Connection) -> EndReason:
        assert this.translator is not None
        ends_at = this.ends_at
        while True:
            message = await self._next(connection, ends_at)
            if isinstance(message, EndReason):
                await session.end(message)
                return message
            limit = self._message_limit(message)
            if len(message) > limit:
                raise Refused(
                    Error(
                        ErrorCode.FRAME_TOO_LARGE,
                        f"message of {len(message)} bytes exceeds {limit}",
                    )
                )
            heard = session.stream_time
            try:
                ends = await this.translator.receive(message, session)
            except ProtocolError as exc:
                await session.report(Error(exc.code, exc.message))
                continue
            finally:
                heard = session.stream_time - heard
                self._metrics.audio_seconds.inc(heard)
                if self.capacity is not None and session.config.diarization:
                    self.capacity.heard(heard)
            if ends:
                await session.end(EndReason.END_OF_STREAM)
                return EndReason.END_OF_STREAM

    def _message_limit(self, message: str | bytes) -> int:
        """Binary messages: max_frame_bytes. Text: room for a maximum frame in base64
        (dialects that carry audio in JSON) and 4 KiB of JSON around it."""
        frame = self._limits.max_frame_bytes
        return frame if isinstance(message, bytes) else -(-frame // 3) * 4 + 4096

    async def _next(self, connection: Connection, ends_at: float) -> str | bytes | EndReason:
        """The client's next message; or why reading stops (a drain, the session's
        maximum duration); Refused(idle_timeout) if nothing comes in time."""
        if self._draining.is_set():
            return EndReason.SHUTTING_DOWN
        left = ends_at - asyncio.get_running_loop().time()
        if left <= 0:
            return EndReason.MAX_DURATION
        idle = self._limits.idle_timeout_s
        receive = asyncio.ensure_future(connection.recv())
        drain = asyncio.ensure_future(self._draining.wait())
        try:
            await asyncio.wait(
                {receive, drain}, timeout=min(idle, left), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            drain.cancel()
            if not receive.done():
                receive.cancel()  # websockets' recv() loses nothing when cancelled
            await asyncio.gather(receive, return_exceptions=True)  # its error is seen once
        if receive.done() and not receive.cancelled():
            return receive.result()  # a message that came with the drain is still read
        if self._draining.is_set():
            return EndReason.SHUTTING_DOWN
        if left <= idle:
            return EndReason.MAX_DURATION
        raise Refused(Error(ErrorCode.IDLE_TIMEOUT, f"no audio or keep_alive for {idle:g} s"))

    async def _close_with(self, connection: Connection, this: _Connection, error: Error) -> None:
        """Send ``error`` and close with its code; the client may already be gone."""
        self._metrics.errors.labels(error.code.value).inc()  # even if the client is gone
        this.error_codes.append(error.code.value)
        assert connection.request is not None
        with contextlib.suppress(ConnectionClosed):
            await connection.send(self.dialect_of(connection.request).error(error))
        close_code = error.code.close_code or CloseCode.INTERNAL_ERROR
        with contextlib.suppress(ConnectionClosed):
            await connection.close(close_code, close_reason(error.message))
