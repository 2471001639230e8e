"""A stream's decoding settings at work: what each request asks of the engine (language,
task, the caller's words as prompt and keyterm bias), and how each result becomes a
message (its language, confidence, warnings; keyterms respelled, redaction and
numerals).

One ``StreamDecoding`` per session, rebuilt when the session is reconfigured; the
engine's tokenizer runs once here, not per segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from parley.core.asr import AsrRequest, Transcriber, Transcription, Vocabulary
from parley.core.keyterms import respellings
from parley.core.redaction import rewrite, rewrite_text
from parley.core.words import end_punctuation
from parley.protocol.messages import FinalWarning, StreamConfig, Word


@dataclass(frozen=True)
class StreamDecoding:
    """A stream's decoding options, made into each segment's request and each result's message."""

    config: StreamConfig
    vocabulary: Vocabulary
    max_prompt_tokens: int

    @classmethod
    def of(cls, config: StreamConfig, engine: Transcriber) -> StreamDecoding:
        """ValueError when the model cannot do what ``config`` asks."""
        engine.check_decoding(config.decoding)
        return cls(config, engine.vocabulary(config.decoding), engine.max_prompt_tokens)

    def request(
        self,
        audio: np.ndarray,
        *,
        with_words: bool,
        draft: tuple[int, ...] | None,
        context: tuple[int, ...],
    ) -> AsrRequest:
        """A segment's request; ``context`` (earlier finals) follows the caller's words,
        cut from its start to fit the prompt."""
        fixed = self.vocabulary.prompt
        room = self.max_prompt_tokens - len(fixed)
        prompt = fixed + (context[-room:] if room > 0 and context else ())
        config = self.config
        return AsrRequest(
            audio,
            config.language,
            with_words=with_words,
            draft=draft,
            context=prompt,
            languages=frozenset(config.languages),
            task=config.task,
            bias=self.vocabulary.bias,
        )

    # ------------------------------------------------------------------ results

    @property
    def _rewrites(self) -> bool:
        return bool(self.config.redact) or self.config.numerals

    def words(self, words: list[Word]) -> list[Word]:
        """Runs spelled like a keyterm written as it; redacted runs made one
        ``[redacted]`` word; numerals as digits."""
        if self.config.keyterms:
            words = self._respelled(words)
        if not self._rewrites:
            return words
        return rewrite(
            words, lambda w: w.word, _joined, self.config.redaction, self.config.numerals
        )

    def _respelled(self, words: list[Word]) -> list[Word]:
        runs = respellings([(w.word, w.probability) for w in words], self.config.keyterms)
        out = list(words)
        for start, end, term in reversed(runs):
            out[start:end] = [
                _joined(words[start:end], term + end_punctuation(words[end - 1].word))
            ]
        return out

    def text(self, text: str, words: list[Word] | None = None) -> str:
        """The text of a result: its rewritten words', else its own, rewritten (a text
        without words, a partial's, is not respelled: respelling reads word
        probabilities)."""
        if not self._rewrites and not (self.config.keyterms and words):
            return text
        if words:
            return " ".join(w.word for w in words)
        return rewrite_text(text, self.config.redaction, self.config.numerals)

    @staticmethod
    def language_fields(result: Transcription) -> dict:
        """A final's ``language``, ``language_probability``, ``confidence``, ``warnings``."""
        probability = result.language_probability
        return {
            "language": result.language,
            "language_probability": round(probability, 3) if probability is not None else None,
            "confidence": round(result.confidence, 3) if result.text else None,
            "warnings": [FinalWarning.LANGUAGE_UNSUPPORTED.value] if result.foreign else [],
        }


def _joined(run: Sequence[Word], text: str) -> Word:
    return Word(text, run[0].start, run[-1].end, min(w.probability for w in run), run[0].speaker)
