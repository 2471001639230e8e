"""How many real-time streams a worker can carry, from what its work has cost (pure:
totals in, a count out).

A worker (the ASR thread, the diarization thread) must keep up with every live
stream's must-do work: finals, and speaker steps. What that costs is measured as
worker seconds per second of audio received, so a silent stream and a talkative one
average out as they do in real use. A stream sent in real time brings one second of
audio a second, so ``streams × cost per audio second`` is the share of the worker
they take. A new stream is admitted only while that share, with it, stays under the
target, so that past capacity the newest client is refused at once, rather than every
admitted stream falling behind together. Partials are not must-do work: they stretch
under load (``core.policy.PartialPacing``) and are not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MEASURE_AUDIO_S = 20.0  # of audio received between two measurements of the cost
SMOOTHING = 0.3  # weight of a new measurement against what was known


@dataclass(frozen=True)
class CapacityPolicy:
    """How much of each worker thread live streams may take before newcomers are refused."""

    # The share of a worker that live streams' must-do work may take. bench/load.py's
    # conversations on a 2-core CPU: at 0.75, 11 labelled streams of 20 offered (and 31
    # unlabelled of 40) held final p50 0.6 s and max 2.4 s, every count right; 0.6 let in
    # 9 (bench/README.md, "Admission by measured capacity").
    target_busy: float = 0.75


class StreamCost:
    """Worker seconds per second of audio received, as measured (or a prior until then).

    ``observe`` takes running totals (worker seconds spent on must-do work, audio
    seconds received); every ``MEASURE_AUDIO_S`` of new audio the ratio of what was
    added moves the estimate. ``None`` as the prior and no measurement yet: unknown,
    and nothing is refused on it."""

    def __init__(self, prior_s_per_s: float | None = None, threads: int = 1):
        self.per_audio_s = prior_s_per_s
        self.threads = threads  # the worker's threads, each at most target_busy
        self._cost_at = 0.0
        self._audio_at = 0.0
        self.measured = False

    def observe(self, cost_total_s: float, audio_total_s: float) -> None:
        """Take the running totals (worker seconds of must-do work, audio seconds
        received); every ``MEASURE_AUDIO_S`` of new audio, the ratio of what was added
        moves the estimate."""
        audio = audio_total_s - self._audio_at
        if audio < MEASURE_AUDIO_S:
            return
        rate = max(0.0, cost_total_s - self._cost_at) / audio
        if self.per_audio_s is None or not self.measured:
            # The first measurement outweighs a prior that was only a guess.
            self.per_audio_s = (
                rate if self.per_audio_s is None else (0.5 * self.per_audio_s + 0.5 * rate)
            )
        else:
            self.per_audio_s += SMOOTHING * (rate - self.per_audio_s)
        self.measured = True
        self._cost_at, self._audio_at = cost_total_s, audio_total_s

    def streams(self, policy: CapacityPolicy) -> float:
        """Real-time streams the worker carries at the target (inf while unknown)."""
        if not self.per_audio_s:
            return math.inf
        return self.threads * policy.target_busy / self.per_audio_s

    def admits(self, streams: int, policy: CapacityPolicy) -> bool:
        """Whether one more stream, beside ``streams`` live ones, stays within the target.
        An idle worker admits one whatever it measured: a cost measured while the machine
        was busy with something else (a warm-up beside other processes) could otherwise
        refuse every stream, and one stream served late beats none served."""
        return streams == 0 or streams + 1 <= self.streams(policy) + 1e-9
