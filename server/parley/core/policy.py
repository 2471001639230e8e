"""The scheduler's choices, made from measured costs (pure functions and small classes).

- ``draft_budgets``: how many draft tokens each row may verify in the next step.
  Speculation pays when a step's fixed cost dominates (few rows: batch size one is
  where it shines); as rows are added each extra position costs more relative to
  what it brings, and budgets shrink towards plain batched decoding by themselves.
- ``encoder_batch_size``: how many newly admitted clips share one encoder pass.
- ``finish_decoding_first``: whether finals almost done decode on before a waiting
  final's encoder pass holds them up.
- ``PartialPacing``: how often each stream may have a partial, so that partials use
  only the time finals leave over, shared evenly among the streams that want them.
- ``SHORT_FINALS_BUSY``: when real-time clients' live finals too take encoder windows
  as long as their clip, not whole 30 s ones.
- ``AsrThreads``: how many cores the ASR thread computes on, by the finals in hand.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal


def draft_budgets(
    acceptance: Sequence[float | None], step_cost: Callable[[int, int], float], max_draft: int
) -> list[int]:
    """Draft budgets that maximise the expected tokens per second of the next step.

    ``acceptance[i]`` is row i's per-token acceptance probability (None: the row has no
    drafter). The k-th draft token of a row is kept with probability ``a ** k``; a
    token is granted while the expected tokens it adds, per second it adds, beat the
    step's expected tokens per second without it. Gains only fall and the cost only
    rises, so the greedy choice stops at the best allocation for this model.
    """
    rows = len(acceptance)
    budgets = [0] * rows
    if rows == 0:
        return budgets
    tokens = rows
    expected = float(rows)  # every row gains at least the token it feeds
    seconds = step_cost(rows, tokens)
    candidates = [(-a, i) for i, a in enumerate(acceptance) if a is not None and a > 0]
    heapq.heapify(candidates)
    while candidates:
        negative_gain, i = heapq.heappop(candidates)
        gain = -negative_gain
        longer = step_cost(rows, tokens + 1)
        if (expected + gain) * seconds <= expected * longer:
            break
        budgets[i] += 1
        tokens += 1
        expected += gain
        seconds = longer
        if budgets[i] < max_draft:
            heapq.heappush(candidates, (-gain * (acceptance[i] or 0.0), i))
    return budgets


def encoder_batch_size(waiting: int, timed: Mapping[int, float]) -> int:
    """How many of ``waiting`` clips the next encoder pass takes: the timed batch size
    that finishes the waiting clips soonest on average.

    Batches of ``k`` run one after another, so clip ``i`` is done after its batch's
    turn: the mean completion is ``cost(k) × (batches + 1) / 2``. A GPU, where a batch
    costs little more than one clip, batches; a small CPU, whose encoder is already
    compute-bound at one clip, takes them one at a time (a batch of two there costs
    two single passes, and delays the first clip by the second's work).

    ``timed`` maps batch sizes to their measured seconds; sizes never timed are never
    chosen (one clip always may be).
    """
    if waiting <= 1:
        return max(waiting, 0)
    sizes = {n: seconds for n, seconds in timed.items() if n <= waiting}
    if 1 not in sizes:
        return 1

    def mean_completion(k: int) -> float:
        return sizes[k] * (math.ceil(waiting / k) + 1) / 2

    return min(sorted(sizes), key=mean_completion)


def remaining_steps(produced: int, steps: int, expected_tokens: float, drafting: bool) -> float:
    """Steps a decode still needs: the tokens it is expected to reach (at least one
    more, end of text) at the pace it has kept so far (before two steps: a guess of
    four tokens a step with a draft, one without)."""
    pace = produced / steps if steps >= 2 else (4.0 if drafting else 1.0)
    return max(1.0, expected_tokens - produced) / max(pace, 1.0)


def finish_decoding_first(
    remaining_seconds: Sequence[float], encoder_seconds: float, deferred_seconds: float = 0.0
) -> bool:
    """Whether the finals decoding now should finish before a waiting final's encoder
    pass: when they will all be done within one pass, the newcomer waits less than the
    pass would hold each of them up (shortest remaining work first, by Smith's rule).

    A newcomer already held back a whole pass (``deferred_seconds``, while the others
    stepped) joins: the estimate was wrong. A decode past the length it was expected to
    reach reads one step from done however long it runs on, and ten long finals due at
    once were decoded one after another (bench/VARIANTS.md, "Finals cut at a speaker
    change")."""
    if deferred_seconds >= encoder_seconds:
        return False
    return bool(remaining_seconds) and max(remaining_seconds) <= encoder_seconds


# A real-time client's live finals take short encoder windows once finals alone have
# kept the ASR thread this busy over the last load window (asr.short_finals_busy; 1.0:
# never), and while other finals wait with it (a burst the load window has not seen yet).
# Well under partials' 0.8: finals that switch back to whole windows at once fall
# behind again before the load window sees it (0.5 did, at ten labelled streams).
# A client streaming faster than real time keeps whole windows (sessions/arrivals.py):
# nobody waits on each of its finals, and short windows read some clips worse
# (bench/VARIANTS.md, "Serving capacity with speaker labels").
SHORT_FINALS_BUSY = 0.3

# Seconds between a stream's partials while the worker has time (the configured pace;
# PartialPacing stretches it under load).
PARTIAL_INTERVAL_S = 1.0


@dataclass(frozen=True)
class PartialPacing:
    """Seconds between one stream's partials, from what the worker has measured.

    Finals come first: they take ``final_load`` of the worker's time. Partials may use
    what is left below ``target_busy``; each of the ``streams`` that want partials gets
    an equal share, so a stream's interval is ``streams × partial cost / spare``, never
    below ``base_s`` (the configured pace, which an idle worker keeps) and never above
    ``max_interval_s``: a long turn's partial is also the draft that makes its final
    cheap, and partials only ever run when no final waits or decodes.
    """

    target_busy: float = 0.8
    max_interval_s: float = 4.0
    min_spare: float = 0.02

    def interval(
        self, base_s: float, streams: int, partial_cost_s: float, final_load: float
    ) -> float:
        """Seconds between a stream's partials: ``base_s``, or longer where ``streams``
        partials at ``partial_cost_s`` each would take more of the worker than finals
        (``final_load``) leave under ``target_busy``."""
        spare = max(self.target_busy - final_load, self.min_spare)
        return max(base_s, min(self.max_interval_s, streams * partial_cost_s / spare))


# A model thread's CPU priority (``workers.threads.lower_priority``): a nice value up to
# LOWEST_NICE, or IDLE, Linux's SCHED_IDLE, below every nice value.
Idle = Literal["idle"]
IDLE: Idle = "idle"
LOWEST_NICE = 19
Priority = int | Idle

# Finals decoding or waiting from which the ASR thread, kept to the cores the speaker
# threads leave it, takes every core (bench/VARIANTS.md, "Ten streams' finals at once").
BURST_FINALS = 4


@dataclass(frozen=True)
class AsrThreads:
    """The ASR thread's torch threads: ``base`` (with speaker labels on a CPU, the cores
    the speaker threads leave it), and ``burst`` while ``burst_finals`` or more finals
    decode or wait (0: never). Many streams' segments ending together (speakers who stop
    at once: ten copies of one 14 s segment are 3 s of one core's work) are worth more
    than the speaker steps meanwhile, which run at a lower priority and thin out while
    the burst lasts."""

    base: int
    burst: int
    burst_finals: int = BURST_FINALS

    def for_finals(self, finals: int) -> int:
        """The threads to compute on with ``finals`` finals decoding or waiting."""
        if self.burst_finals and finals >= self.burst_finals:
            return max(self.base, self.burst)
        return self.base
