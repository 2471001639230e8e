"""The guards' rules for text: Whisper's stock phrases ("Thank you.") dropped when decoded
with doubt and kept when said; a short text far too unsure of itself dropped; a doubtful
text far under the stream's speech dropped, and the stream's speech level it is measured
against."""

from __future__ import annotations

import numpy as np
import pytest

from parley.core.asr import Transcription
from parley.core.quality import QualityGuards
from parley.core.speech_level import SpeechLevel, loudness_db
from parley.core.stock_phrases import is_stock_phrase
from parley.core.words import TimedWord

TONE = (0.1 * np.sin(2 * np.pi * 440 * np.arange(16000) / 16000)).astype(np.float32)  # -23 dBFS


@pytest.mark.parametrize(
    "text",
    [
        "Thank you.",
        "Thank you very much.",
        "Thanks for watching! Thanks for watching!",
        "Subtitles by the Amara.org community",
        "Thank you. Bye.",
        "ご視聴ありがとうございました。",
        "Продолжение следует...",
    ],
)
def test_stock_phrases_are_known_in_any_case_and_punctuation(text):
    """Every sentence a stock phrase, whatever its case, punctuation or repeats."""
    assert is_stock_phrase(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "...",
        "Thank you all for coming today.",
        "Goodbye. Thank you for trying out the Asterisk open-source PBX.",
        "Thank you for your patience.",
    ],
)
def test_speech_that_merely_starts_alike_is_not_a_stock_phrase(text):
    """A sentence that says more than the phrase, or nothing, is not one."""
    assert not is_stock_phrase(text)


def test_a_doubtful_stock_phrase_goes_and_a_sure_one_stays():
    """Signs measured on tiny.en (bench/nonspeech.py): a crowd's murmur decoded as "Thank
    you." at a mean log-probability of -0.97 and no-speech 0.15, which openai's rules
    keep; Asterisk's Allison saying it, -0.14 and 0.04."""
    guards = QualityGuards()
    assert guards.rejects(0.15, -0.97, 0.33, 3, "Thank you.") == "no_speech"
    assert guards.rejects(0.04, -0.14, 0.33, 3, "Thank you.") is None
    assert guards.rejects(0.15, -0.97, 0.6, 8, "Thank you all for coming today.") is None


def test_a_short_text_far_too_unsure_goes_whatever_its_no_speech():
    """tiny.en on a far crowd: "and" at a mean log-probability of -2.5 and no-speech 0.3,
    which the no-speech rules keep; real words said alone measured -1.75 or better."""
    guards = QualityGuards()
    assert guards.rejects(0.30, -2.5, 0.13, 1, "and") == "no_speech"
    assert guards.rejects(0.13, -1.7, 0.13, 2, "Oh,") is None
    assert guards.rejects(0.30, -2.5, 0.6, 9, "We are going to go on the south.") is None


def test_a_doubtful_text_far_under_the_talkers_goes():
    """Signs measured on tiny.en (bench/nonspeech.py): a far-off crowd's murmur in a pause
    written as a sentence at a mean log-probability of -1.29, 17.6 dB under the stream's
    talkers; a real quiet turn under noise, 10.9 dB under, is kept (bench/VARIANTS.md);
    a sure decode is speech however quiet."""
    guards = QualityGuards()
    assert guards.too_quiet(-1.29, 17.6)
    assert not guards.too_quiet(-1.29, 10.9)
    assert not guards.too_quiet(-0.4, 25.0)


def test_loudness_is_of_a_segments_loud_part():
    """A tone's loudness is its energy in dBFS, and a pause inside a segment (up to most
    of it) does not lower it."""
    assert abs(loudness_db(TONE) - 20 * np.log10(0.1 / np.sqrt(2))) < 0.1
    paused = np.concatenate([TONE, np.zeros(48000, np.float32)])
    assert abs(loudness_db(paused) - loudness_db(TONE)) < 0.1
    assert loudness_db(TONE[:100]) == pytest.approx(loudness_db(TONE), abs=1.0)


def _under(db: float) -> np.ndarray:
    """``TONE`` ``db`` dB quieter."""
    return (TONE * 10 ** (-db / 20)).astype(np.float32)


def _decoded(text: str, avg_logprob: float) -> Transcription:
    words = tuple(TimedWord(w, 0.0, 0.1, 0.5) for w in text.split())
    return Transcription(text, (1, 2), words, avg_logprob=avg_logprob)


def test_a_streams_finals_are_judged_against_the_sure_ones_before_them():
    """No level until a final decodes surely; then the median loudness of the sure
    finals (not of a doubtful or an empty one) is what a doubtful final, partial or not,
    is measured against; a stream judged by no guards keeps every text."""
    quiet, loud = _under(40), TONE
    level = SpeechLevel(QualityGuards())
    murmur = _decoded("We are going to go on the top.", -1.4)
    assert level.final(murmur, quiet) == murmur  # no level yet: nothing to measure by
    assert level.final(_decoded("", -0.1), loud).text == ""
    assert level.level_db is None
    assert level.final(_decoded("Hello there.", -0.2), loud).text == "Hello there."
    assert level.final(_decoded("Fine.", -0.3), _under(3)).text == "Fine."
    assert level.level_db == pytest.approx(loudness_db(loud) - 1.5)
    dropped = level.final(murmur, quiet)
    assert (dropped.text, dropped.words, dropped.rejected) == ("", (), "no_speech")
    assert level.judged(murmur, quiet).text == ""
    assert level.judged(murmur, _under(8)).text == murmur.text  # near the talkers: kept
    assert level.level_db == pytest.approx(loudness_db(loud) - 1.5)  # a partial is not heard
    unjudged = SpeechLevel(None)
    unjudged.final(_decoded("Hello there.", -0.2), loud)
    assert unjudged.final(murmur, quiet) == murmur
