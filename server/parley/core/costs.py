"""What the ASR engine's work costs, learnt from timing it (pure: numbers in, estimates out).

The scheduler's choices (how long each row's draft is, how many clips share an
encoder pass, how often a stream may have a partial) come from these estimates, not
from fixed thresholds, so one policy serves a 2-core CPU and a GPU alike.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace
from typing import Any

import numpy as np


class StepCostModel:
    """Seconds of one batched decoder step, as ``c0 + c_row × rows + c_token × tokens``.

    ``tokens`` counts every position fed (each row's last token plus its draft). The
    coefficients are a least-squares fit over the latest ``window`` steps, pulled
    towards the prior by ``prior_weight`` pseudo-observations so that directions the
    data does not yet cover (say, only one row so far) stay sensible.

    Once ``trusted_after`` steps are in, a step counts as at most ``outlier_factor``
    times what the model expected of it. A least-squares fit follows one stalled step
    wherever it lies: on an H200 one drafted step of two rows stalled, the fit charged
    it all to the tokens (145 ms each), and drafting stopped for good, since plain steps
    say nothing about tokens (bench/files_gpu.py). Steps that stay slow still raise the
    estimate, by up to that factor a step.
    """

    def __init__(
        self,
        prior: tuple[float, float, float],
        window: int = 256,
        prior_weight: float = 1.0,
        outlier_factor: float = 4.0,
        trusted_after: int = 8,
    ):
        self._prior = np.asarray(prior, dtype=float)
        self._prior_weight = prior_weight
        self._outlier_factor = outlier_factor
        self._trusted_after = trusted_after
        self._samples: deque[tuple[int, int, float]] = deque(maxlen=window)
        self._coefficients = self._prior.copy()
        self._stale = False

    def observe(self, rows: int, tokens: int, seconds: float) -> None:
        """One timed step: ``rows`` rows fed ``tokens`` positions in ``seconds``."""
        if len(self._samples) >= self._trusted_after:
            seconds = min(seconds, self._outlier_factor * self(rows, tokens))
        self._samples.append((rows, tokens, seconds))
        self._stale = True

    @property
    def recent(self) -> tuple[tuple[int, int, float], ...]:
        """The steps the fit reads now, oldest first: (rows, tokens, seconds as counted)."""
        return tuple(self._samples)

    @property
    def coefficients(self) -> tuple[float, float, float]:
        """``(c0, c_row, c_token)``, refitted to the steps seen when any came since."""
        if self._stale:
            self._coefficients = self._fit()
            self._stale = False
        c0, c_row, c_token = self._coefficients
        return float(c0), float(c_row), float(c_token)

    def __call__(self, rows: int, tokens: int) -> float:
        c0, c_row, c_token = self.coefficients
        return c0 + c_row * rows + c_token * tokens

    def _fit(self) -> np.ndarray:
        data = np.array(self._samples, dtype=float)
        x = np.column_stack([np.ones(len(data)), data[:, 0], data[:, 1]])
        y = data[:, 2]
        # Ridge towards the prior, scaled to the data so that the prior weighs like
        # ``prior_weight`` typical steps.
        scale = self._prior_weight * np.mean(x * x, axis=0)
        a = x.T @ x + np.diag(scale)
        b = x.T @ y + scale * self._prior
        fitted = np.linalg.solve(a, b)
        return np.maximum(fitted, 0.0)  # no step gets cheaper by doing more


class EncoderCosts:
    """Seconds of one encoder pass over ``n`` clips.

    One clip's cost is a moving average of every single-clip pass. A batch of ``n`` is
    kept as its ratio to ``n`` single passes timed alongside it, because absolute times
    drift with what else the machine does, while the ratio (what batching saves) does
    not. A batch size never timed is assumed to cost ``n`` single passes.
    """

    def __init__(self, smoothing: float = 0.2):
        self._smoothing = smoothing
        self._single: float | None = None
        self._ratios: dict[int, float] = {1: 1.0}

    def observe(self, clips: int, seconds: float) -> None:
        """One timed encoder pass over ``clips`` clips."""
        if clips == 1:
            old = self._single
            self._single = seconds if old is None else old + self._smoothing * (seconds - old)
        elif self._single is not None:
            ratio = seconds / (clips * self._single)
            old = self._ratios.get(clips)
            self._ratios[clips] = ratio if old is None else old + self._smoothing * (ratio - old)

    def __call__(self, clips: int) -> float:
        return clips * (self._single or 0.0) * self._ratios.get(clips, 1.0)

    @property
    def known(self) -> dict[int, float]:
        """Estimated seconds for each batch size timed so far."""
        return {n: self(n) for n in self._ratios} if self._single is not None else {}


@dataclass(frozen=True)
class DecayingRate:
    """Amount per second over roughly the last ``tau`` seconds (exponential decay).

    Immutable: ``add`` returns the updated rate, so one thread can publish it and
    another read it without a lock.
    """

    tau: float
    since: float
    value: float = 0.0
    at: float = 0.0

    @classmethod
    def starting(cls, tau: float, now: float) -> DecayingRate:
        return cls(tau, now, 0.0, now)

    def add(self, amount: float, now: float) -> DecayingRate:
        """This rate with ``amount`` more at ``now``."""
        return replace(self, value=self._decayed(now) + amount, at=max(now, self.at))

    def rate(self, now: float) -> float:
        """Amount per second at ``now``, over the decaying window so far."""
        elapsed = now - self.since
        if elapsed <= 0:
            return 0.0
        # Normalise by the part of the window that has existed so far.
        return self._decayed(now) / (self.tau * (1.0 - math.exp(-elapsed / self.tau)))

    def _decayed(self, now: float) -> float:
        return self.value * math.exp(-max(0.0, now - self.at) / self.tau)


# Each step that verifies none of a row's draft tokens forgets this share of the
# rejections it has seen past the prior's. The draft budgets follow the estimate, so a
# row priced out by two early rejections was never offered a draft token again, and
# never measured again: at ten streams sending the same audio at once, finals whose
# partial's draft parted from them in the first words (then realigned) were offered 5
# draft tokens of 46 and took 64 steps, where those kept in play took 34.
FORGET_PER_IDLE_STEP = 0.2


class Acceptance:
    """How often a row's draft tokens are kept, as a per-token probability.

    Drafts are kept up to the first disagreement, so each step that rejects ends one
    run of kept tokens: the estimate is kept / (kept + rejections), starting from the
    pseudo-counts ``prior_kept`` and ``prior_rejections``. A step with nothing verified
    moves the rejections back towards the prior's (``FORGET_PER_IDLE_STEP``).
    """

    def __init__(self, prior_kept: float = 4.0, prior_rejections: float = 1.0):
        self.kept = prior_kept
        self.rejections = prior_rejections
        self._prior_rejections = prior_rejections

    def observe(self, proposed: int, accepted: int) -> None:
        """One step: ``accepted`` of its ``proposed`` draft tokens were kept."""
        if proposed == 0:
            past = max(0.0, self.rejections - self._prior_rejections)
            self.rejections -= FORGET_PER_IDLE_STEP * past
            return
        self.kept += accepted
        if accepted < proposed:
            self.rejections += 1

    @property
    def probability(self) -> float:
        """The estimated chance that the next drafted token is kept."""
        total = self.kept + self.rejections
        return self.kept / total if total > 0 else 0.0


def cost_report(step: StepCostModel, encoder: EncoderCosts) -> dict[str, Any]:
    """The measured cost models, in milliseconds (for /health)."""
    c0, c_row, c_token = step.coefficients
    return {
        "step_ms": round(1000 * c0, 2),
        "step_ms_per_row": round(1000 * c_row, 2),
        "step_ms_per_token": round(1000 * c_token, 2),
        "encoder_ms_by_clips": {n: round(1000 * s, 1) for n, s in sorted(encoder.known.items())},
    }
