"""The server-wide settings every session is built with."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from parley.core.policy import PARTIAL_INTERVAL_S
from parley.core.vad import VadConfig
from parley.core.word_timing import WordTimingConfig


@dataclass(frozen=True)
class SessionOptions:
    """Server-wide settings of every session: turn detection, partials, drafts, prompt."""

    vad: VadConfig
    partial_interval_s: float = PARTIAL_INTERVAL_S  # it stretches under load
    context_tokens: int = 0  # tokens of earlier finals given to the model as its prompt
    hypothesis_drafts: bool = True  # re-use the last partial's tokens as a draft
    word_timing: WordTimingConfig = WordTimingConfig()
    # Told, for each final, the seconds from receiving the audio at its end to its
    # sending (the latency a client sees after the speaker stops); for metrics.
    final_latency: Callable[[float], None] | None = None
    # Told the seconds of stream audio each final settles (up to its end, the silence
    # before it included, and the rest at the end); admission measures cost by it.
    audio_settled: Callable[[float], None] | None = None
