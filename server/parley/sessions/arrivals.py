"""When one client's audio arrived: to time its finals by, and to tell a client that
sends in real time (someone is waiting on each final) from one that sends faster (a
file replayed, a test): only the first gets cheaper, short-window finals under load."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

ARRIVALS_KEPT = 1024  # audio messages whose arrival time is kept (20 s of 20 ms frames)
# A client is real time while, over the last PACE_WINDOW_S of wall time, it sent at most
# REALTIME_PACE times as much audio, plus PACE_SLACK_S: room for one large message or a
# little audio buffered before it connected. A client replaying a file is paced by the
# server's back-pressure only: by how fast its audio is decoded, many times real time.
PACE_WINDOW_S = 10.0
REALTIME_PACE = 1.5
PACE_SLACK_S = 1.0


class Arrivals:
    """The stream time each audio message reached, and when it arrived."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._opened = clock()
        self._kept: deque[tuple[float, float]] = deque(maxlen=ARRIVALS_KEPT)
        self._dropped = False  # the oldest arrivals are gone: pace from the oldest kept

    def note(self, stream_time: float) -> None:
        """Audio up to ``stream_time`` arrived now."""
        self._dropped = self._dropped or len(self._kept) == ARRIVALS_KEPT
        self._kept.append((stream_time, self._clock()))

    def since(self, stream_time: float) -> float | None:
        """Seconds since the audio up to ``stream_time`` had arrived (None: it came
        before the arrivals kept, or has not come)."""
        for reached, arrived in self._kept:
            if reached >= stream_time - 1e-6:
                return self._clock() - arrived
        return None

    def realtime(self) -> bool:
        """Whether the client has been sending at about real time (at most
        ``REALTIME_PACE`` times it), over the last ``PACE_WINDOW_S`` or since it
        connected."""
        if not self._kept:
            return True
        now = self._clock()
        since = self._kept[0] if self._dropped else (0.0, self._opened)
        for reached, arrived in self._kept:
            if now - arrived < PACE_WINDOW_S:
                break
            since = (reached, arrived)
        audio = self._kept[-1][0] - since[0]
        return audio <= REALTIME_PACE * (now - since[1]) + PACE_SLACK_S
