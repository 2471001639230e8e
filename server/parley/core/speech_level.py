"""How loud a segment is against the stream's own speech, and a stream's finals judged
by it (pure).

A far-off crowd's murmur in a meeting's pauses reaches the VAD as speech, and Whisper
writes whole sentences over it ("We are going to go on the top of the top."), with
doubt, but no more doubt than real speech through noise or a phone line shows
(bench/VARIANTS.md, "Words where nobody spoke"). What sets the murmur apart is its
level: 12.7 to 28.8 dB under the stream's talkers, while over the devset's recordings,
whose talkers change level by up to ±9 dB, no final that far under the stream's speech
and that doubtful read what was said (bench/VARIANTS.md, "Doubtful text far under the
stream's speech"). The stream's speech level is taken from its surely decoded finals
only, so a stream of murmur alone has none, and the rule waits for speech. Finals are
judged in stream order, each against the finals before it, so a client that streams
faster than real time gets what a real-time one gets.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

import numpy as np

from parley.core.asr import Transcription
from parley.core.quality import QualityGuards

FRAME_SAMPLES = 480  # 30 ms at 16 kHz, the VAD's frame
LOUD_PERCENTILE = 90  # a segment's loud part: the pauses inside it do not lower it
SURE_LOGPROB = -0.5  # a final decoded this surely (mean token log-probability) was speech
LEVELS_KEPT = 32  # the latest sure finals whose loudness makes the stream's speech level


def loudness_db(audio: np.ndarray) -> float:
    """The ``LOUD_PERCENTILE``th percentile of ``audio``'s 30 ms frames' energy, in dBFS."""
    frames = len(audio) // FRAME_SAMPLES
    if frames:
        energy = np.mean(audio[: frames * FRAME_SAMPLES].reshape(frames, -1) ** 2, axis=1)
    else:  # shorter than a frame: the one frame it is
        energy = np.array([np.mean(audio**2) if len(audio) else 0.0])
    return float(np.percentile(10 * np.log10(energy + 1e-12), LOUD_PERCENTILE))


class SpeechLevel:
    """One stream's speech level, and its decodes judged against it."""

    def __init__(self, guards: QualityGuards | None):
        self._guards = guards
        self._sure: deque[float] = deque(maxlen=LEVELS_KEPT)

    @property
    def level_db(self) -> float | None:
        """The median loudness of the latest sure finals, in dBFS (None: none yet)."""
        return float(np.median(self._sure)) if self._sure else None

    def judged(self, result: Transcription, audio: np.ndarray) -> Transcription:
        """``result`` (a partial's or a final's, of ``audio``), or, when it is doubtful and
        far under the finals' before it, the same with its text dropped as ``no_speech``.
        The audio is measured only when that is in doubt: most partials never are."""
        level, guards = self.level_db, self._guards
        if (
            guards is None
            or level is None
            or not result.text
            or result.avg_logprob >= guards.quiet_doubt_logprob
            or not guards.too_quiet(result.avg_logprob, level - loudness_db(audio))
        ):
            return result
        return replace(result, text="", words=(), rejected="no_speech", foreign=False)

    def final(self, result: Transcription, audio: np.ndarray) -> Transcription:
        """The next final's result judged; its audio's loudness heard if it was decoded
        surely."""
        result = self.judged(result, audio)
        if result.text and result.avg_logprob >= SURE_LOGPROB:
            self._sure.append(loudness_db(audio))
        return result
