"""Signs in a finished decode that its text is not what was said (pure): no speech, a
repetition loop, or an English-only model hearing another language."""

from __future__ import annotations

import gzip
import re
from collections.abc import Sequence
from dataclasses import dataclass

from parley.core.stock_phrases import is_stock_phrase


@dataclass(frozen=True)
class QualityGuards:
    """openai/whisper's rules for text that is not speech (its thresholds), and more.

    openai keeps a confident decode even when the no-speech probability is high; that
    is how silence becomes " you" or "Thank you.". A no-speech probability above
    ``certain_no_speech`` drops the text however confident the decode. And a text of a
    few tokens needs less doubt to go: loud white noise after silence decoded as "You"
    (no-speech 0.53 to 0.57, mean log-probability -1.7 to -1.8), while spoken one-word
    answers ("Yes.", "No.", "Okay.", "Sure.") measured no-speech 0.08 to 0.25 and
    mean log-probability -0.37 to -0.80. Above ``short_certain_no_speech`` a short text
    goes however confident: a crowd's murmur in a pause decoded as "Thank you." (no-speech
    0.55 and 0.64, log-probability -0.85 and -0.89), a 1 kHz beep as a curse (0.64), two
    of Asterisk's tones as "you" (0.73, 0.77); 153 real short utterances (KTuberling's
    English words, Asterisk's English prompts: tiny.en, 3 tokens or fewer) measured 0.25
    at most; with base, 0.44 at most but for one word, "train", at 0.55, now dropped.
    """

    no_speech_threshold: float = 0.6
    logprob_threshold: float = -1.0
    compression_ratio_threshold: float = 2.4
    certain_no_speech: float = 0.9
    short_text_tokens: int = 3  # a text this short (or shorter) is a "short" one
    short_no_speech_threshold: float = 0.4
    short_certain_no_speech: float = 0.5
    # An English-only model hearing another language writes fluent English with little
    # confidence, and more doubt that it heard speech at all: its mean log-probability
    # less twice its no-speech probability below this flags it (bench/vocabulary.py:
    # -1.3 flagged 31 of 31 other-language finals and 4 of 124 English ones; the
    # log-probability alone at -0.9, 29 and 10).
    foreign_doubt: float = -1.3
    foreign_no_speech_weight: float = 2.0
    # A text that is only Whisper's stock phrases ("Thank you.", core.stock_phrases) goes
    # unless decoded surely: said, it decodes near certain; written over a murmur or a
    # noise, with doubt (bench/nonspeech.py).
    stock_phrase_logprob: float = -0.5
    # A short text the model gives itself less than e^-2 (0.14) a token goes whatever
    # its no-speech probability: a murmur's "and" or "The" (-2.4 to -3.3), while real
    # words said alone decoded at -1.75 or better (bench/nonspeech.py).
    short_doubt_logprob: float = -2.0
    # A decode of audio this many dB under the stream's speech (``core.speech_level``)
    # goes when its mean log-probability is under ``quiet_doubt_logprob``: a far-off
    # crowd's murmur in a pause, written as sentences at -1.3 to -2.3 and 12.7 to 28.8 dB
    # under the talkers; over the devset's 117 recordings no final so quiet and doubtful
    # read what was said, and at 10 dB real quiet turns went (bench/VARIANTS.md).
    quiet_db: float = 12.0
    quiet_doubt_logprob: float = -1.0

    def too_quiet(self, avg_logprob: float, quieter_db: float) -> bool:
        """A decode this doubtful, of audio ``quieter_db`` under the stream's speech
        (``core.speech_level``), is not speech."""
        return quieter_db >= self.quiet_db and avg_logprob < self.quiet_doubt_logprob

    def foreign(self, avg_logprob: float, no_speech_prob: float) -> bool:
        """The decode of an English-only model looks like another language's speech."""
        return avg_logprob - self.foreign_no_speech_weight * no_speech_prob < self.foreign_doubt

    def rejects(
        self,
        no_speech_prob: float,
        avg_logprob: float,
        compression: float,
        text_tokens: int,
        text: str,
    ) -> str | None:
        """Why a decode's ``text`` is not speech (``no_speech``, ``repetition``), or None."""
        doubtful = avg_logprob < self.logprob_threshold
        if avg_logprob < self.stock_phrase_logprob and is_stock_phrase(text):
            return "no_speech"
        if no_speech_prob > self.certain_no_speech or (
            no_speech_prob > self.no_speech_threshold and doubtful
        ):
            return "no_speech"
        if text_tokens <= self.short_text_tokens and (
            no_speech_prob > self.short_certain_no_speech
            or (doubtful and no_speech_prob > self.short_no_speech_threshold)
            or avg_logprob < self.short_doubt_logprob
        ):
            return "no_speech"
        if compression > self.compression_ratio_threshold:
            return "repetition"
        return None


def compression_ratio(text: str) -> float:
    """How much gzip shrinks ``text``: a repetition loop compresses far better than speech."""
    data = text.encode("utf-8")
    return len(data) / len(gzip.compress(data)) if data else 0.0


def repeats_itself(text: str) -> bool:
    """Whether ``text`` says a run of three words or more twice in a row, or any run three
    times in a row ("Hello? Hello? Hello?"): how a decode that missed its end loops,
    often before gzip would notice (``compression_ratio``)."""
    return _repeats(re.sub(r"[^\w' ]", " ", text.lower()).split())


def _repeats(words: Sequence[str]) -> bool:
    for k in range(1, len(words) // 2 + 1):
        run = 0  # words so far that equal the word k before them
        for i in range(k, len(words)):
            run = run + 1 if words[i] == words[i - k] else 0
            if run >= 2 * k or (k >= 3 and run >= k):
                return True
    return False


def ends_repeating(tokens: Sequence[int]) -> bool:
    """Whether ``tokens`` end in a run of four or more said twice, or any run three times:
    a decode looping, seen as it loops (``repeats_itself`` reads the finished text)."""
    n = len(tokens)
    for k in range(1, n // 2 + 1):
        if tokens[n - k :] == tokens[n - 2 * k : n - k] and (
            k >= 4 or (n >= 3 * k and tokens[n - k :] == tokens[n - 3 * k : n - 2 * k])
        ):
            return True
    return False


def repeat_bans(tokens: Sequence[int], n: int) -> set[int]:
    """The tokens that would end a run of ``n`` that ``tokens`` already hold (none when
    ``n`` is 0): what a decode told not to repeat itself (``AsrRequest.no_repeat``) may
    not write next. It depends only on the tokens before the position, so a draft's
    positions are judged as the plain decode's would be, and decoding stays exact."""
    if n <= 0 or len(tokens) < n:
        return set()
    tail = list(tokens[len(tokens) - n + 1 :]) if n > 1 else []
    return {
        tokens[i + n - 1] for i in range(len(tokens) - n + 1) if list(tokens[i : i + n - 1]) == tail
    }
