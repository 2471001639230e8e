"""What the ASR scheduler counts, and what it tells an observer (metrics) as it works."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class SchedulerObserver(Protocol):
    """Told, on the worker thread, what each decode and step took (metrics)."""

    def decoded(self, final: bool, waited_s: float, compute_s: float) -> None:
        """A decode left the batch: whether it was a final's, how long it waited for a
        row, and the worker seconds it cost."""

    def stepped(self, rows: int) -> None:
        """One decoder step ran with ``rows`` rows."""


@dataclass
class SchedulerStats:
    """Counts and timings of the scheduler's work, for ``/health`` and metrics."""

    jobs_done: int = 0
    jobs_failed: int = 0
    partials_refused: int = 0  # not queued, because a final waited or room was short
    partials_cancelled: int = 0  # the session no longer wanted it
    partials_evicted: int = 0  # gave its row to a final
    background_evicted: int = 0  # a recording's window gave its row to a final
    second_attempts: int = 0  # finals and windows decoded again (core.attempts.second_attempt)
    steps: int = 0
    rows_stepped: int = 0  # sum over steps of the rows in each
    tokens_fed: int = 0  # sum over steps of the positions fed
    encoder_passes: int = 0
    encoded_clips: int = 0
    drafted: int = 0
    accepted: int = 0
    busy_seconds: float = 0.0
    audio_seconds: float = 0.0

    def to_json(self) -> dict:
        """The counters, seconds rounded to the millisecond."""
        return {
            name: round(value, 3) if isinstance(value, float) else value
            for name, value in vars(self).items()
        }
