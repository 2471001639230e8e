"""Admission by measured capacity: whether one more live stream keeps every stream real
time, from what the ASR thread's finals and the diarization thread's steps have cost
per second of audio (``core.capacity``)."""

from __future__ import annotations

from dataclasses import dataclass

from parley.core.capacity import CapacityPolicy, StreamCost
from parley.workers.diarization import DiarizationWorker
from parley.workers.scheduler import AsrScheduler

# Before the first measurement: a final's cost per audio second is about this many
# one-clip encoder passes over a whole window (the warm-up times one), by (speaker labels,
# finals over short windows). Measured on bench/load.py's conversations, tiny.en, this
# 2-core CPU: 0.104 s per audio second at 0.376 s a pass; with labels the ASR thread has
# one core, and finals are also cut at speaker changes (more, shorter segments): 0.37 to
# 0.50; with finals over short windows, 0.13 and 0.15.
ENCODER_PASSES_PER_AUDIO_S = {
    (False, False): 0.28,
    (True, False): 0.45,
    (False, True): 0.13,
    (True, True): 0.15,
}
# A labelled stream steps its speaker window every diarization.step_s of audio, each
# step costing about this much before one is measured: nine labelled streams of
# bench/load.py on this 2-core CPU measured 0.069 s of CPU a steady-state step.
DIARIZATION_STEP_PRIOR_S = 0.07


@dataclass(frozen=True)
class LiveLoad:
    """The live streams now: all of them, and those with speaker labels."""

    streams: int
    diarized: int


class LiveCapacity:
    """Measures the workers' cost per audio second, and says why one more stream would
    not fit (``refusal``).

    The ASR thread's cost is counted against the audio its finals have settled
    (``settled``: a final settles its stream up to its end, silence before it
    included), so a fast stream whose finals are still decoding is not measured as
    cheap. A speaker step's cost is counted against the ``step_s`` of audio it stands
    for, looked at as labelled audio arrives (``heard``)."""

    def __init__(
        self,
        asr: AsrScheduler,
        diarization: DiarizationWorker | None,
        policy: CapacityPolicy,
        diarization_step_s: float | None = None,
    ):
        self._asr = asr
        self._diarization = diarization
        self.policy = policy
        self._audio_s = 0.0
        self._step_s = diarization_step_s
        encoder = asr.encoder_cost.known.get(1)
        # Real-time clients' finals take short windows once finals keep the ASR thread
        # short_finals_busy: below the target, so at the target they are short.
        short = asr.short_finals or asr.short_finals_busy < policy.target_busy
        passes = ENCODER_PASSES_PER_AUDIO_S[diarization is not None, short]
        self.asr_cost = StreamCost(None if encoder is None else encoder * passes)
        self.diarization_cost = StreamCost(
            None if not diarization_step_s else DIARIZATION_STEP_PRIOR_S / diarization_step_s,
            threads=diarization.threads if diarization is not None else 1,
        )

    def settled(self, seconds: float) -> None:
        """A live stream's finals now cover ``seconds`` more of its audio."""
        self._audio_s += seconds
        self.asr_cost.observe(self._asr.live_finals_cost_s, self._audio_s)

    def heard(self) -> None:
        """A labelled stream's audio arrived: the speaker steps' cost is looked at. It
        is counted from steady-state steps only (a whole window, every speaker embedded),
        each standing for ``step_s`` of its stream's audio: a stream's first steps and
        steps thinned under load are cheaper, and counting them let 15 labelled streams
        onto a 2-core machine, 3 to 6 of which then showed too few speakers (bench/README.md,
        "Admission by measured capacity")."""
        if self._diarization is not None and self._step_s:
            stats = self._diarization.stats
            self.diarization_cost.observe(stats.full_cost_seconds, stats.full_steps * self._step_s)

    def streams(self) -> dict[str, float]:
        """Real-time streams each worker carries at the target (inf: not yet known)."""
        carried = {"asr": self.asr_cost.streams(self.policy)}
        if self._diarization is not None:
            carried["diarization"] = self.diarization_cost.streams(self.policy)
        return carried

    def refusal(self, load: LiveLoad, diarized: bool) -> str | None:
        """Why one more stream (``diarized`` or not) would not fit; None if it does."""
        if not self.asr_cost.admits(load.streams, self.policy):
            return (
                f"the server is at its measured capacity of "
                f"{int(self.asr_cost.streams(self.policy))} real-time streams; "
                "try again later"
            )
        if diarized and not self.diarization_cost.admits(load.diarized, self.policy):
            return (
                f"the server is at its measured capacity of "
                f"{int(self.diarization_cost.streams(self.policy))} streams with speaker "
                "labels; try again later, or stream without diarization"
            )
        return None

    def full(self, load: LiveLoad) -> bool:
        """Whether even a stream without labels would be refused (``/readyz``)."""
        return self.refusal(load, diarized=False) is not None
