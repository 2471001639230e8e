"""The ASR engine's typed contract: what the scheduler asks of an engine, and what it gets.

The scheduler (``runtime.scheduler``) keeps many decodes in flight and advances them
together, one decoder step at a time, as LLM servers do:

- ``start`` admits requests: one batched encoder pass over their audio, then their
  prompts; each becomes a ``Decode`` holding one row of the engine's batch;
- ``step`` advances the given decodes by one batched verify pass; each row may carry
  its own draft (its previous hypothesis, or the assistant's), of at most its budget,
  and keeps the longest prefix the model agrees with;
- ``finish`` turns a finished decode into a ``Transcription``; ``drop`` abandons one.

Between steps decodes may join (``start``) and leave (``finish``/``drop``). The real
engine is ``models.whisper_engine.WhisperEngine``; the tests' fake engine honours the
same contract. Nothing here imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal, Protocol, TypeVar, get_args

import numpy as np

from parley.core.audio import SAMPLE_RATE
from parley.core.keyterms import KeytermBias
from parley.core.quality import QualityGuards
from parley.core.words import TimedWord


class Task(str, Enum):
    """What Whisper writes: the speech in its own language, or its English translation."""

    TRANSCRIBE = "transcribe"
    TRANSLATE = "translate"


# Whisper was trained on transcripts that mostly leave "um" and "uh" out, and writes
# them when its prompt holds them (as OpenAI advises its Whisper API's callers). Of the
# prompts tried, the bare fillers cost the other words least (bench/VARIANTS.md, "Filler
# words"). English fillers: other languages' differ.
FILLER_PROMPT = "Um, uh, er, hmm."


def with_fillers(prompt: str) -> str:
    """A caller's prompt, ``FILLER_PROMPT`` last: a prompt past Whisper's room keeps its end."""
    return f"{prompt} {FILLER_PROMPT}".strip()


@dataclass(frozen=True)
class Decoding:
    """What a caller asks of the model besides its audio, for a whole stream or file.

    ``language`` forces one language; else a multilingual model detects each segment's,
    among ``languages`` when that is not empty. ``keyterms`` and ``prompt`` steer the
    text towards the caller's words (``Transcriber.vocabulary``)."""

    language: str | None = None
    languages: frozenset[str] = frozenset()
    task: Task = Task.TRANSCRIBE
    keyterms: tuple[str, ...] = ()
    prompt: str = ""

    @property
    def detects(self) -> bool:
        """Each segment's language is detected (none was forced)."""
        return self.language is None


# The engine's defaults, which the settings show: the most draft tokens one step
# verifies, and the decodes one batch advances together (a decoder row each).
MAX_DRAFT = 15
MAX_ROWS = 16
# The precisions an engine may be loaded in (``models.device.plan_device`` says what each
# means): the settings, the command line and the device plan read this one list.
ComputeType = Literal["auto", "float32", "int8", "bfloat16"]
COMPUTE_TYPES: tuple[str, ...] = get_args(ComputeType)


@dataclass(frozen=True)
class Vocabulary:
    """A caller's words as the engine takes them: prompt tokens and a keyterm trie."""

    prompt: tuple[int, ...] = ()
    bias: KeytermBias | None = None


@dataclass(frozen=True)
class AsrRequest:
    """Decode ``audio`` (16 kHz mono float32, at most the engine's ``max_audio_s``)."""

    audio: np.ndarray
    language: str | None = None  # None: a multilingual model detects it
    with_words: bool = False  # word timings (finals want them, partials not)
    draft: tuple[int, ...] | None = None  # an earlier hypothesis of this audio's prefix
    context: tuple[int, ...] = ()  # the prompt: the caller's words, earlier text
    languages: frozenset[str] = frozenset()  # detection restricted to these (empty: any)
    task: Task = Task.TRANSCRIBE
    bias: KeytermBias | None = None  # keyterms the decoder favours (lossless w.r.t. it)
    whole_window: bool = False  # encode a full 30 s window, however short the audio
    # Padding after the audio past the engine's own margin (``RETRY_MARGIN_S``: a decode
    # over a short window that ran on, decoded again over a wider one first).
    margin_s: float = 0.0
    # No run of this many tokens written twice (0: no such rule): how a decode that
    # looped is decoded again (``second_attempt``).
    no_repeat: int = 0
    # Above 0: each token drawn from the model's distribution at this temperature (a seeded
    # draw, the same each time; no drafts), as Whisper's fallback decodes a doubtful text
    temperature: float = 0.0

    @property
    def seconds(self) -> float:
        return len(self.audio) / SAMPLE_RATE


@dataclass
class DecodeStats:
    """Counts of one decode's passes and draft tokens (offered, kept)."""

    passes: int = 0  # decoder passes after the prompt
    drafted: int = 0  # draft tokens offered
    accepted: int = 0  # draft tokens kept
    verify_steps: int = 0  # passes that carried a draft

    @property
    def mean_accepted(self) -> float:
        return self.accepted / self.verify_steps if self.verify_steps else 0.0


@dataclass(frozen=True)
class Transcription:
    """What a finished decode gives: text, tokens, word times and the decode's signs."""

    text: str
    tokens: tuple[int, ...]
    words: tuple[TimedWord, ...] = ()  # times relative to the audio start
    no_speech_prob: float = 0.0
    avg_logprob: float = 0.0
    rejected: str | None = None  # why the text was dropped (no_speech, repetition)
    stats: DecodeStats = field(default_factory=DecodeStats)
    language: str | None = None  # the language decoded in ("en" on an English-only model)
    language_probability: float | None = None  # when it was detected, not forced
    runner_up: tuple[str, float] | None = None  # detection's second language, its probability
    compression_ratio: float = 0.0  # of the text (repetitive text compresses well)
    # The decode looks like speech the model cannot read (protocol.md's
    # ``language_unsupported``): an English-only model hearing another language.
    foreign: bool = False
    # Decoded over a window shorter than 30 s, it ran past its audio or repeated itself
    # (models/encoder.py): to be decoded again over a wider window (``second_attempt``).
    window_too_short: bool = False
    # Runs of the words the model, asked, found likely enough written as a keyterm:
    # (the run's letters, the term) pairs (``core.keyterms.to_ask``).
    heard_keyterms: tuple[tuple[str, str], ...] = ()
    # 0 for the likeliest tokens; above it, drawn at it (``core.attempts``' fallback).
    temperature: float = 0.0

    @property
    def confidence(self) -> float:
        """The decode's mean token probability (of its mean log-probability)."""
        return math.exp(self.avg_logprob)


@dataclass(frozen=True)
class StepReport:
    """What one step did for one decode: draft tokens offered and kept."""

    proposed: int
    accepted: int

    @property
    def width(self) -> int:
        """Positions the decode fed in this pass: its last token plus the draft."""
        return 1 + self.proposed


class Decode(Protocol):
    """One request in flight; it holds a row of the engine's batch until it leaves."""

    @property
    def finished(self) -> bool:
        """End of text (or the decoder's length limit) was reached: ``finish`` it."""
        ...

    @property
    def drafting(self) -> bool:
        """It has a drafter (previous hypothesis or assistant): budgets matter to it."""
        ...


D = TypeVar("D", bound=Decode)


class Transcriber(Protocol[D]):
    """An ASR engine that decodes many requests at once, step by step (one thread owns it)."""

    label: str
    max_rows: int  # decodes in flight at once
    max_audio_s: float  # longest request audio
    max_draft: int  # longest draft one step verifies

    multilingual: bool  # it detects, transcribes and translates many languages
    languages: frozenset[str]  # the languages it transcribes
    max_prompt_tokens: int  # the longest ``AsrRequest.context``
    guards: QualityGuards | None  # its decodes' rules, a session's finals' too (None: none)

    def check_language(self, language: str | None) -> None:
        """Raise ValueError when this model cannot transcribe ``language``."""
        ...

    def check_decoding(self, decoding: Decoding) -> None:
        """Raise ValueError when this model cannot do what ``decoding`` asks."""
        ...

    def prompt_tokens(self, text: str) -> tuple[int, ...]:
        """``text`` as the tokens of a prompt (``AsrRequest.context``): a caller's
        vocabulary or earlier text, at most the decoder's prompt length."""
        ...

    def vocabulary(self, decoding: Decoding) -> Vocabulary:
        """``decoding``'s prompt as prompt tokens (the last ``max_prompt_tokens`` of a
        longer one) and its keyterms as a trie."""
        ...

    def start(self, requests: Sequence[AsrRequest]) -> list[D]:
        """Encode ``requests`` in one batched pass and feed their prompts.

        Raises ValueError for a request it cannot take (too long, wrong language);
        at most ``max_rows`` minus the decodes in flight may start.
        """
        ...

    def step(self, decodes: Sequence[D], budgets: Sequence[int]) -> list[StepReport]:
        """One batched verify pass over ``decodes`` (none finished); ``budgets[i]``
        caps the draft of ``decodes[i]``."""
        ...

    def finish(self, decode: D) -> Transcription:
        """The result of a finished decode; frees its row."""
        ...

    def drop(self, decode: D) -> None:
        """Abandon a decode (finished or not); frees its row."""
        ...


def decoding_problem(
    decoding: Decoding, label: str, multilingual: bool, known: frozenset[str]
) -> str | None:
    """Why a model (``label``; ``known`` its languages) cannot do what ``decoding`` asks,
    or None: the one rule both engines apply."""
    asked = ({decoding.language} if decoding.language else set()) | set(decoding.languages)
    if not multilingual:
        if asked - {"en"}:
            return f"model {label} is English-only; language must be 'en'"
        if decoding.task is Task.TRANSLATE:
            return f"model {label} is English-only; it cannot translate (task=translate)"
        return None
    unknown = sorted(asked - known)
    if unknown:
        return f"model {label} does not know language(s) {', '.join(map(repr, unknown))}"
    return None
