"""What the ASR thread has learnt about its load and its finals (pure: times in, figures out).

The thread tells the ledger each stretch of work and each finished decode; the
ledger keeps the busy fraction, the finals' share of it and a partial's cost (which
pace partials), and how many tokens a final makes per second of audio and how long
its finish takes (which say when the finals decoding now will be done).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from parley.core.costs import DecayingRate

LOAD_WINDOW_S = 10.0  # how far back the load estimates look
PARTIAL_COST_SMOOTHING = 0.2
# A final's tokens per second of audio, and the seconds its finish (word timings) takes,
# before any is measured; moving averages of finished finals replace them.
TOKENS_PER_SECOND_PRIOR = 3.0
FINISH_SECONDS_PRIOR = 0.03
FINAL_SMOOTHING = 0.1
MIN_FINAL_SECONDS = 0.5  # shorter finals say little about tokens per second


@dataclass(frozen=True)
class Load:
    """What the thread has measured lately, published (replaced whole) for the loop."""

    busy: DecayingRate  # worker seconds per second: the busy fraction
    finals: DecayingRate  # worker seconds per second spent on finals
    partial_cost_s: float = 0.0  # worker seconds one partial costs


class LoadLedger:
    """Written by the ASR thread only; the event loop reads ``load``, an immutable value."""

    def __init__(self, now: float):
        self.load = Load(
            DecayingRate.starting(LOAD_WINDOW_S, now), DecayingRate.starting(LOAD_WINDOW_S, now)
        )
        self.tokens_per_second = TOKENS_PER_SECOND_PRIOR
        self.finish_seconds = FINISH_SECONDS_PRIOR
        self._partial_cost: float | None = None
        self.finals_cost_total = 0.0  # worker seconds all live finals have cost so far

    def worked(self, seconds: float, now: float) -> None:
        """The worker was busy ``seconds`` up to ``now``."""
        self.load = replace(self.load, busy=self.load.busy.add(seconds, now))

    def decoded(self, final: bool, cost: float, now: float) -> None:
        """A decode left the batch, done or not, having cost ``cost`` worker seconds."""
        if final:
            self.load = replace(self.load, finals=self.load.finals.add(cost, now))
            self.finals_cost_total += cost
            return
        if self._partial_cost is None:
            self._partial_cost = cost
        else:
            self._partial_cost += PARTIAL_COST_SMOOTHING * (cost - self._partial_cost)
        self.load = replace(self.load, partial_cost_s=self._partial_cost)

    def final_done(self, audio_seconds: float, tokens: int, finish_seconds: float) -> None:
        """A final was decoded: its audio seconds, tokens, and the seconds its finish (word
        timings) took move the token rate and finish time the scheduler plans with."""
        if audio_seconds > MIN_FINAL_SECONDS:
            rate = tokens / audio_seconds
            self.tokens_per_second += FINAL_SMOOTHING * (rate - self.tokens_per_second)
        self.finish_seconds += FINAL_SMOOTHING * (finish_seconds - self.finish_seconds)
