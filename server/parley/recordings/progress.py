"""How far a recording's job has come, for a progress bar: its windows decoded and its
speakers' audio heard, told as one fraction."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Progress:
    """How many of a recording's windows are decoded, told to ``on_change`` as a fraction."""

    total: int
    done: int = 0
    on_change: Callable[[float], None] | None = None

    def advance(self) -> None:
        self.done += 1
        if self.on_change is not None:
            self.on_change(self.done / max(self.total, 1))


class JobProgress:
    """A job's parts' fractions (each 0 to 1), told to ``on_change`` as their mean: it
    moves while any part does and reaches 1 only once every part has (a bar that stood
    at 100 % while the speakers were still being found would look stuck). ``part``'s
    setters may be called from any thread: ``on_change`` is called on the event loop."""

    STEP = 0.01  # a part's fraction is told again once it has moved this much

    def __init__(self, on_change: Callable[[float], None] | None, parts: int):
        self._on_change = on_change
        self._fractions = [0.0] * parts
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    def part(self, index: int) -> Callable[[float], None] | None:
        """The setter of part ``index``'s fraction (None when nobody listens)."""
        if self._on_change is None:
            return None
        told = [0.0]

        def set_fraction(fraction: float) -> None:
            if fraction - told[0] >= self.STEP or (fraction >= 1.0 > told[0]):
                told[0] = fraction
                if threading.get_ident() == self._loop_thread:
                    self._set(index, fraction)
                else:
                    self._loop.call_soon_threadsafe(self._set, index, fraction)

        return set_fraction

    def _set(self, index: int, fraction: float) -> None:
        # Never back: a part's threads may report out of order (each its own share).
        self._fractions[index] = max(self._fractions[index], min(fraction, 1.0))
        if self._on_change is not None:
            self._on_change(sum(self._fractions) / len(self._fractions))
