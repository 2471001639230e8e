"""One connection, several tracks: a phone call's two directions, a meeting's participants.

Each track is a ``Session`` of its own (its own VAD, decoder state and speaker, the
track's name); the group merges their messages into one stream for the connection and
ends them together. Finals go out in the order their segments ended, across tracks: a
final waits until no other track can still send one that ended earlier (none of its
closed segments is still decoding, and its audio has reached that time), unless that
track's audio has stopped coming (a muted participant must not hold up the others).

It offers the endpoint what a single ``Session`` does (``end``, ``close``, ``report``,
``mark``, ``messages``), so a dialect chooses one or the other without the endpoint
knowing.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from parley.protocol.messages import (
    EndReason,
    Error,
    Final,
    ServerMessage,
    SessionEnded,
    StreamConfig,
)
from parley.sessions.marks import Barrier, Mark, MarkPayload
from parley.sessions.session import Session

MERGED_SIZE = 256
STALLED_S = 2.0  # a track whose audio stopped this long ago holds no final back
RECHECK_S = 0.2  # how often held finals are looked at while audio comes in
_END = object()


class _TimeOrder:
    """Finals held until they are due, earliest end first."""

    def __init__(self) -> None:
        self._held: list[tuple[float, int, Final]] = []
        self._arrivals = itertools.count()

    def hold(self, final: Final) -> None:
        heapq.heappush(self._held, (final.end, next(self._arrivals), final))

    def due(self, until: float) -> list[Final]:
        out = []
        while self._held and self._held[0][0] <= until + 1e-6:
            out.append(heapq.heappop(self._held)[2])
        return out

    def __bool__(self) -> bool:
        return bool(self._held)


class SessionGroup:
    """One session per track of a connection, their messages merged in stream time."""

    def __init__(
        self, config: StreamConfig, make_session: Callable[[StreamConfig, str, float], Session]
    ):
        self.config = config  # the connection's (each track may differ)
        self._make_session = make_session
        self._tracks: dict[str, Session] = {}
        self._pumps: list[asyncio.Task] = []
        self._merged: asyncio.Queue = asyncio.Queue(MERGED_SIZE)
        self._ended = False
        # Each track numbers its segments from 0; the connection's numbers are unique.
        self._segment_ids: dict[tuple[str, int], int] = {}
        self._track_of: dict[int, str] = {}
        self._next_segment_id = itertools.count()
        self._order = _TimeOrder()
        self._resting: set[str] = set()  # tracks that left: they hold nothing back
        self._releasing = asyncio.Lock()
        self._recheck: asyncio.Task | None = None

    @property
    def stream_time(self) -> float:
        """Audio received, in seconds: the longest track's."""
        return max((s.stream_time for s in self._tracks.values()), default=0.0)

    @property
    def tracks(self) -> dict[str, Session]:
        """Each track's session, by track name."""
        return dict(self._tracks)

    @property
    def counted_streams(self) -> int:
        """What the connection counts for in the live load: a stream per track."""
        return max(1, len(self._tracks))

    def track(
        self, name: str, config: StreamConfig, speaker: str, offset_s: float = 0.0
    ) -> Session:
        """The track's session, started on first use with ``config``, ``speaker`` and
        the time it starts at (``offset_s``)."""
        self._resting.discard(name)
        if name not in self._tracks:
            if self._ended:
                raise RuntimeError("the session group has ended")
            session = self._make_session(config, speaker, offset_s)
            self._tracks[name] = session
            self._pumps.append(asyncio.create_task(self._pump(name, session)))
            if self._recheck is None:
                self._recheck = asyncio.create_task(self._recheck_held())
        return self._tracks[name]

    async def _pump(self, name: str, session: Session) -> None:
        async for message in session.messages():
            if getattr(message, "segment_id", None) is not None:
                # Only the messages that carry a segment_id get here.
                message = replace(message, segment_id=self._connection_id(name, message))  # type: ignore[arg-type]
            if isinstance(message, Mark) and isinstance(message.payload, Barrier):
                barrier = message.payload
                barrier.waiting -= 1
                if barrier.waiting == 0:  # after every final the tracks had before it
                    await self._release(math.inf)
                    await self._merged.put(barrier.mark)
            elif isinstance(message, Final):
                self._order.hold(message)
            elif not isinstance(message, SessionEnded):  # one for the group, at its end
                await self._merged.put(message)
            await self._release(self._settled_until())

    async def rest(self, name: str) -> None:
        """The track's speaker left: their open segment ends now, and the track holds no
        other's finals back until it has audio again."""
        if name in self._tracks:
            await self._tracks[name].finalize()
            self._resting.add(name)

    def _settled_until(self) -> float:
        """The time before which no track can still send a final (tracks that left or
        whose audio stopped coming, with nothing left decoding, do not count)."""
        now = time.monotonic()
        holding = [
            s.settled_until()
            for name, s in self._tracks.items()
            if s.decoding or (name not in self._resting and now - s.last_audio_at < STALLED_S)
        ]
        return min(holding, default=math.inf)

    async def _release(self, until: float) -> None:
        async with self._releasing:  # one releaser at a time keeps the order
            for final in self._order.due(until):
                await self._merged.put(final)

    async def _recheck_held(self) -> None:
        while True:
            await asyncio.sleep(RECHECK_S)
            if self._order:
                await self._release(self._settled_until())

    def _connection_id(self, track: str, message) -> int:
        key = (track, message.segment_id)
        if key not in self._segment_ids:
            self._segment_ids[key] = next(self._next_segment_id)
            self._track_of[self._segment_ids[key]] = track
        return self._segment_ids[key]

    def track_of(self, segment_id: int) -> str | None:
        """The track whose segment has this connection-wide ``segment_id``."""
        return self._track_of.get(segment_id)

    async def finalize(self) -> None:
        """Close every track's open segment now; each track's ``finalized`` follows its finals."""
        for session in self._tracks.values():
            await session.finalize()

    async def end(self, reason: EndReason = EndReason.END_OF_STREAM) -> None:
        """End every track; once their last results are out, one ``session_ended``."""
        self._ended = True
        for session in self._tracks.values():
            await session.end(reason)
        await asyncio.gather(*self._pumps)
        await self._release(math.inf)
        if self._recheck is not None:
            self._recheck.cancel()
        segments = sum(s.segments for s in self._tracks.values())
        await self._merged.put(SessionEnded(self.stream_time, segments, reason))
        await self._merged.put(_END)

    async def report(self, error: Error) -> None:
        """A non-fatal error, sent in order with the tracks' results."""
        await self._merged.put(error)

    async def mark(self, payload: MarkPayload) -> None:
        """Queue ``Mark(payload)`` behind everything every track has queued so far."""
        mark = Mark(payload, self.stream_time)
        if not self._tracks:
            await self._merged.put(mark)
            return
        barrier = Barrier(mark, len(self._tracks))
        for session in self._tracks.values():
            await session.mark(barrier)

    def close(self) -> None:
        """The client is gone: every track cancels its unfinished work."""
        self._ended = True
        for pump in self._pumps:
            pump.cancel()
        if self._recheck is not None:
            self._recheck.cancel()
        for session in self._tracks.values():
            session.close()

    async def messages(self) -> AsyncIterator[ServerMessage | Mark]:
        """Every track's messages, finals in the order their segments ended, until the
        group's ``session_ended``."""
        while (item := await self._merged.get()) is not _END:
            yield item
