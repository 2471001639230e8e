"""A stream's decoding settings at work: what each request asks of the engine (language,
task, the caller's words as prompt and keyterm bias), and how each result becomes a
message (its language, confidence, warnings; keyterms respelled, the caller's
replacements, spoken punctuation, redaction, numerals and profanity masked).

One ``StreamDecoding`` per session, rebuilt when the session is reconfigured; the
engine's tokenizer runs once here, not per segment.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

import numpy as np

from parley.core.asr import AsrRequest, Transcriber, Transcription, Vocabulary
from parley.core.dictation import dictate, dictate_text
from parley.core.keyterms import respellings
from parley.core.number_chain import NumberChain
from parley.core.profanity import mask_text, mask_words
from parley.core.redaction import NO_CARRY, Carry, rewrite, rewrite_text
from parley.core.replacements import Replacement, replace_text, replace_words, replacements
from parley.core.words import end_punctuation
from parley.protocol.messages import Final, FinalWarning, StreamConfig, Word


@dataclass(frozen=True)
class StreamDecoding:
    """A stream's decoding options, made into each segment's request and each result's message."""

    config: StreamConfig
    vocabulary: Vocabulary
    max_prompt_tokens: int
    replacements: tuple[Replacement, ...] = ()

    @classmethod
    def of(cls, config: StreamConfig, engine: Transcriber) -> StreamDecoding:
        """ValueError when the model cannot do what ``config`` asks."""
        engine.check_decoding(config.decoding)
        return cls(
            config,
            engine.vocabulary(config.decoding),
            engine.max_prompt_tokens,
            replacements(config.replace),
        )

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
    def rewrites(self) -> bool:
        """Whether results are rewritten before they leave (spoken punctuation, redaction,
        numerals, profanity)."""
        config = self.config
        return bool(config.redact) or config.numerals or config.profanity_filter or config.dictation

    def respelled(self, words: list[Word], heard: Collection[tuple[str, str]] = ()) -> list[Word]:
        """Runs spelled like a keyterm, or that the model heard as one (``heard``: the
        decode's ``Transcription.heard_keyterms``), written as it; then the caller's
        replacements made."""
        out = list(words)
        if self.config.keyterms:
            spoken = [(w.word, w.probability) for w in words]
            runs = respellings(spoken, self.config.keyterms, heard)
            for start, end, term in reversed(runs):
                out[start:end] = [
                    _joined(words[start:end], term + end_punctuation(words[end - 1].word))
                ]
        return replace_words(out, self.replacements, _word_text, _shared)

    def text(self, text: str, words: list[Word]) -> str:
        """A final's text before it is rewritten: its respelled words', else its own
        (with the replacements made)."""
        if not (self.config.keyterms or self.replacements):
            return text
        return " ".join(w.word for w in words) if words else replace_text(text, self.replacements)

    def final(self, final: Final, carry: Carry = NO_CARRY, open_end: bool = False) -> Final:
        """The final as it leaves: spoken punctuation as marks, redacted runs made one
        ``[redacted]`` word, numerals as digits, profanity masked; ``carry`` and
        ``open_end`` as ``core.redaction.rewrite`` takes them (a number read on across
        finals)."""
        if not self.rewrites:
            return final
        config = self.config
        if not final.words:
            text = dictate_text(final.text) if config.dictation else final.text
            text = rewrite_text(text, config.redaction, config.numerals, carry)
            return replace(final, text=mask_text(text) if config.profanity_filter else text)
        spoken = dictate(final.words, _word_text, _joined) if config.dictation else final.words
        words = rewrite(
            spoken,
            _word_text,
            _joined,
            config.redaction,
            config.numerals,
            open_end,
            carry,
        )
        if config.profanity_filter:
            words = mask_words(words, _word_text, lambda w, text: replace(w, word=text))
        return replace(final, words=words, text=" ".join(w.word for w in words))

    def finals(self, finals: list[Final]) -> list[Final]:
        """A recording's finals, in order, as they leave (``final``): a number read on
        from one final into the next is judged whole."""
        chain: NumberChain[Final] = NumberChain(self.config.redaction)
        out: list[Final] = []
        for final in finals:
            released = chain.push(final, final_words(final), final.start, final.end)
            out.extend(self.final(f, carry, open_end) for f, carry, open_end in released)
        out.extend(self.final(f, carry, open_end) for f, carry, open_end in chain.close())
        return out

    def partial_text(self, text: str, carry: Carry = NO_CARRY) -> str:
        """A partial's (or a recording's progress) text as it leaves: its last number
        redacted while it may still grow into a redacted one; ``carry``: what its first
        run joins of the finals before it (``core.redaction.Carry``). The replacements are
        made first, as a final's are."""
        text = replace_text(text, self.replacements)
        if not self.rewrites:
            return text
        config = self.config
        if config.dictation:
            text = dictate_text(text)
        text = rewrite_text(text, config.redaction, config.numerals, carry)
        return mask_text(text) if config.profanity_filter else text

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


def final_words(final: Final) -> list[str]:
    """A final's words as redaction reads them (its text's, when it has no word times)."""
    return [w.word for w in final.words] if final.words else final.text.split()


def _joined(run: Sequence[Word], text: str) -> Word:
    return Word(text, run[0].start, run[-1].end, min(w.probability for w in run), run[0].speaker)


def _word_text(word: Word) -> str:
    return word.word


def _shared(run: Sequence[Word], texts: list[str]) -> list[Word]:
    """A run's words written as ``texts``, its time shared out evenly among them."""
    start, step = run[0].start, (run[-1].end - run[0].start) / len(texts)
    probability = min(w.probability for w in run)
    return [
        Word(
            text,
            round(start + k * step, 3),
            round(start + (k + 1) * step, 3),
            probability,
            run[0].speaker,
        )
        for k, text in enumerate(texts)
    ]
