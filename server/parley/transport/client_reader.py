"""Reading one client's messages into its session: the size limit of a message, the
idle timeout, the session's maximum duration and the server's drain."""

from __future__ import annotations

import asyncio

from parley.protocol.messages import EndReason, Error, ErrorCode, ProtocolError
from parley.runtime.capacity import LiveCapacity
from parley.runtime.metrics import Metrics
from parley.sessions.streams import Stream
from parley.transport.admission import Refused, StreamLimits
from parley.transport.connection import Connection
from parley.transport.dialect import Translator
from parley.transport.lifecycle import Lifecycle


class ClientReader:
    """Shared by every session of the endpoint (no per-session state)."""

    def __init__(
        self,
        limits: StreamLimits,
        lifecycle: Lifecycle,
        metrics: Metrics,
        capacity: LiveCapacity | None = None,
    ):
        self._limits = limits
        self._lifecycle = lifecycle
        self._metrics = metrics
        self.capacity = capacity

    async def read(
        self, connection: Connection, session: Stream, translator: Translator, ends_at: float
    ) -> EndReason:
        """Feed the client's messages to ``session`` until it ends (why), or until reading
        must stop (a drain, ``ends_at``: the session's maximum duration); Refused for a
        message over the size limit or for an idle client."""
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
                ends = await translator.receive(message)
            except ProtocolError as exc:
                await session.report(Error(exc.code, exc.message))
                continue
            finally:
                heard = session.stream_time - heard
                self._metrics.audio_seconds.inc(heard)
                if self.capacity is not None and session.config.diarization:
                    self.capacity.heard()
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
        if self._lifecycle.draining.is_set():
            return EndReason.SHUTTING_DOWN
        left = ends_at - asyncio.get_running_loop().time()
        if left <= 0:
            return EndReason.MAX_DURATION
        idle = self._limits.idle_timeout_s
        receive = asyncio.ensure_future(connection.recv())
        drain = asyncio.ensure_future(self._lifecycle.draining.wait())
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
        if self._lifecycle.draining.is_set():
            return EndReason.SHUTTING_DOWN
        if left <= idle:
            return EndReason.MAX_DURATION
        raise Refused(Error(ErrorCode.IDLE_TIMEOUT, f"no audio or keep_alive for {idle:g} s"))
