"""One connection, several tracks: a phone call's two directions, a meeting's participants.

Each track is a ``Session`` of its own (its own VAD, decoder state and speaker, the
track's name); the group merges their messages into one stream for the connection,
each in its own order, and ends them together. It offers the endpoint what a single
``Session`` does (``end``, ``close``, ``report``, ``mark``, ``messages``), so a
dialect chooses one or the other without the endpoint knowing.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from typing import AsyncIterator, Callable

from parley.protocol.messages import (EndReason, Error, ServerMessage, SessionEnded,
                                      StreamConfig)
from parley.runtime.session import Mark, Session

MERGED_SIZE = 256
_END = object()


class _Barrier:
    """A group mark on its way through every track: let out once all have passed it, so
    it follows everything the tracks had queued before it, as a session's mark does."""

    def __init__(self, mark: Mark, tracks: int):
        self.mark = mark
        self.waiting = tracks


class SessionGroup:
    def __init__(self, config: StreamConfig,
                 make_session: Callable[[StreamConfig, str, float], Session]):
        self.config = config  # the connection's (each track may differ)
        self._make_session = make_session
        self._tracks: dict[str, Session] = {}
        self._pumps: list[asyncio.Task] = []
        self._merged: asyncio.Queue = asyncio.Queue(MERGED_SIZE)
        self._ended = False
        # Each track numbers its segments from 0; the connection's numbers are unique.
        self._segment_ids: dict[tuple[str, int], int] = {}
        self._next_segment_id = itertools.count()

    @property
    def stream_time(self) -> float:
        """Audio received, in seconds: the longest track's."""
        return max((s.stream_time for s in self._tracks.values()), default=0.0)

    @property
    def tracks(self) -> dict[str, Session]:
        return dict(self._tracks)

    def track(self, name: str, config: StreamConfig, speaker: str,
              offset_s: float = 0.0) -> Session:
        """The track's session, started on first use with ``config``, ``speaker`` and
        the time it starts at (``offset_s``)."""
        if name not in self._tracks:
            if self._ended:
                raise RuntimeError("the session group has ended")
            session = self._make_session(config, speaker, offset_s)
            self._tracks[name] = session
            self._pumps.append(asyncio.create_task(self._pump(name, session)))
        return self._tracks[name]

    async def _pump(self, name: str, session: Session) -> None:
        async for message in session.messages():
            if getattr(message, "segment_id", None) is not None:
                message = replace(message, segment_id=self._connection_id(name, message))
            if isinstance(message, Mark) and isinstance(message.payload, _Barrier):
                barrier = message.payload
                barrier.waiting -= 1
                if barrier.waiting == 0:
                    await self._merged.put(barrier.mark)
            elif not isinstance(message, SessionEnded):  # one for the group, at its end
                await self._merged.put(message)

    def _connection_id(self, track: str, message) -> int:
        key = (track, message.segment_id)
        if key not in self._segment_ids:
            self._segment_ids[key] = next(self._next_segment_id)
        return self._segment_ids[key]

    async def finalize(self) -> None:
        for session in self._tracks.values():
            await session.finalize()

    async def end(self, reason: EndReason = EndReason.END_OF_STREAM) -> None:
        """End every track; once their last results are out, one ``session_ended``."""
        self._ended = True
        for session in self._tracks.values():
            await session.end(reason)
        await asyncio.gather(*self._pumps)
        segments = sum(s.segments for s in self._tracks.values())
        await self._merged.put(SessionEnded(self.stream_time, segments, reason))
        await self._merged.put(_END)

    async def report(self, error: Error) -> None:
        await self._merged.put(error)

    async def mark(self, payload: object) -> None:
        """Queue ``Mark(payload)`` behind everything every track has queued so far."""
        mark = Mark(payload, self.stream_time)
        if not self._tracks:
            await self._merged.put(mark)
            return
        barrier = _Barrier(mark, len(self._tracks))
        for session in self._tracks.values():
            await session.mark(barrier)

    def close(self) -> None:
        self._ended = True
        for pump in self._pumps:
            pump.cancel()
        for session in self._tracks.values():
            session.close()

    async def messages(self) -> AsyncIterator[ServerMessage | Mark]:
        while (item := await self._merged.get()) is not _END:
            yield item
