"""A small ASR engine that honours ``parley.core.asr.Transcriber`` without a model.

It "hears" loudness: every 0.2 s of audio louder than a whisper becomes one word,
``w0`` … ``w9`` by its level, timed where it was said. That is enough to tell
segments apart and to check that each final is the transcription of exactly its own
audio, while decoding stays deterministic, fast and lossless like the real one:
tokens come one per step plus whatever part of a draft agrees with them. Optional
sleeps stand in for the cost of encoder passes and steps, so that scheduler tests
can make decodes overlap.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from parley.core.asr import (
    AsrRequest,
    DecodeStats,
    Decoding,
    StepReport,
    Transcription,
    Vocabulary,
    decoding_problem,
)
from parley.core.attempts import transcribe
from parley.core.audio import SAMPLE_RATE
from parley.core.quality import repeat_bans
from parley.core.words import TimedWord

WORD_SECONDS = 0.2
QUIET_RMS = 0.01
FIRST_TOKEN = 1000


def hear(audio: np.ndarray) -> list[tuple[int, float, float]]:
    """(token, start, end) for each loud 0.2 s piece of ``audio``."""
    step = int(WORD_SECONDS * SAMPLE_RATE)
    heard = []
    for start in range(0, len(audio) - step // 2, step):
        piece = audio[start : start + step]
        rms = float(np.sqrt(np.mean(np.square(piece, dtype=np.float64))))
        if rms > QUIET_RMS:
            level = min(9, int(np.log10(rms / QUIET_RMS) * 4.5))
            heard.append(
                (
                    FIRST_TOKEN + level,
                    start / SAMPLE_RATE,
                    min(len(audio), start + step) / SAMPLE_RATE,
                )
            )
    return heard


def unrepeated(heard: list[tuple[int, float, float]], n: int) -> list[tuple[int, float, float]]:
    """``heard`` as a decode told not to write any run of ``n`` twice writes it: a word
    that would is left out (``AsrRequest.no_repeat``; 0: every word)."""
    kept: list[tuple[int, float, float]] = []
    for word in heard:
        if word[0] not in repeat_bans([token for token, _, _ in kept], n):
            kept.append(word)
    return kept


def text_of(tokens: Sequence[int]) -> str:
    return " ".join(f"w{t - FIRST_TOKEN}" for t in tokens)


@dataclass(eq=False)
class FakeDecode:
    request: AsrRequest
    target: list[tuple[int, float, float]]
    tokens: list[int] = field(default_factory=list)
    stats: DecodeStats = field(default_factory=DecodeStats)
    released: bool = False

    @property
    def finished(self) -> bool:
        return len(self.tokens) >= len(self.target)

    @property
    def drafting(self) -> bool:
        return self.request.draft is not None


class FakeEngine:
    """Deterministic stand-in for the Whisper engine (English only, like tiny.en)."""

    label = "fake"
    max_audio_s = 30.0
    max_draft = 15
    multilingual = False
    languages = frozenset({"en"})
    max_prompt_tokens = 223
    guards = None  # its text is what the test asks for, never judged

    def __init__(
        self,
        max_rows: int = 8,
        encode_s: float = 0.0,
        step_s: float = 0.0,
        fail: Callable[[AsrRequest], bool] | None = None,
    ):
        self.max_rows = max_rows
        self.encode_s = encode_s
        self.step_s = step_s
        self._fail = fail
        self.in_flight: list[FakeDecode] = []
        self.step_sizes: list[int] = []  # rows in each step, in order
        self.whole_windows: list[bool] = []  # whether each request started asked for one
        self.contexts: list[tuple[int, ...]] = []  # each request's prompt, as it started
        # Set by every step: a test waits on it for "a decode is under way", not a sleep.
        self.stepped = threading.Event()

    def prompt_tokens(self, text: str) -> tuple[int, ...]:
        return tuple(FIRST_TOKEN + len(word) % 10 for word in text.split())[-223:]

    def check_language(self, language: str | None) -> None:
        self.check_decoding(Decoding(language=language))

    def check_decoding(self, decoding: Decoding) -> None:
        problem = decoding_problem(decoding, self.label, self.multilingual, frozenset({"en"}))
        if problem:
            raise ValueError(problem)

    def vocabulary(self, decoding: Decoding) -> Vocabulary:
        """The prompt's words as tokens; the fake hears loudness, so no bias changes it."""
        return Vocabulary(self.prompt_tokens(decoding.prompt), None)

    def start(self, requests: Sequence[AsrRequest]) -> list[FakeDecode]:
        for request in requests:
            self.check_decoding(Decoding(request.language, request.languages, request.task))
            if request.seconds > self.max_audio_s:
                raise ValueError(f"{request.seconds:.1f} s of audio; at most 30 s at once")
            if self._fail is not None and self._fail(request):
                raise RuntimeError("the fake engine was told to fail this request")
        if len(self.in_flight) + len(requests) > self.max_rows:
            raise RuntimeError(f"the engine holds {self.max_rows} rows")
        time.sleep(self.encode_s * len(requests))
        self.whole_windows.extend(r.whole_window for r in requests)
        self.contexts.extend(r.context for r in requests)
        decodes = [FakeDecode(r, unrepeated(hear(r.audio), r.no_repeat)) for r in requests]
        self.in_flight.extend(decodes)
        return decodes

    def step(self, decodes: Sequence[FakeDecode], budgets: Sequence[int]) -> list[StepReport]:
        self.stepped.set()
        time.sleep(self.step_s)
        self.step_sizes.append(len(decodes))
        reports = []
        for d, budget in zip(decodes, budgets):
            if d.finished or d.released:
                raise ValueError("a finished or dropped decode cannot take another step")
            want = [token for token, _, _ in d.target]
            d.tokens.append(want[len(d.tokens)])
            draft = list(d.request.draft or ())
            offered = []
            if draft[: len(d.tokens)] == d.tokens:
                offered = draft[len(d.tokens) : len(d.tokens) + budget]
            kept = 0
            while (
                kept < len(offered)
                and len(d.tokens) < len(want)
                and offered[kept] == want[len(d.tokens)]
            ):
                d.tokens.append(offered[kept])
                kept += 1
            d.stats.passes += 1
            if offered:
                d.stats.verify_steps += 1
                d.stats.drafted += len(offered)
                d.stats.accepted += kept
            reports.append(StepReport(len(offered), kept))
        return reports

    def finish(self, decode: FakeDecode) -> Transcription:
        self.drop(decode)
        words = ()
        if decode.request.with_words:
            words = tuple(
                TimedWord(f"w{token - FIRST_TOKEN}", start, end, 1.0)
                for token, start, end in decode.target
            )
        return Transcription(
            text_of(decode.tokens), tuple(decode.tokens), words, stats=decode.stats, language="en"
        )

    def drop(self, decode: FakeDecode) -> None:
        if not decode.released:
            decode.released = True
            self.in_flight.remove(decode)

    def transcribe(self, audio: np.ndarray, with_words: bool = False) -> Transcription:
        return transcribe(self, AsrRequest(audio, with_words=with_words))


def load_fake_asr(settings):
    """``parley.loading.load_asr``'s contract, with the fake engine: how the cluster tests'
    replicas load ASR (they import this module by name, from tests/ on PYTHONPATH)."""
    from parley.sessions.streams import AsrService
    from parley.workers.scheduler import AsrScheduler

    engine = FakeEngine()
    scheduler = AsrScheduler(engine, settings.asr.queue_size)
    return scheduler, AsrService(scheduler, engine.label)
