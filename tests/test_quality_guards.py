"""The guards' rules for text: Whisper's stock phrases ("Thank you.") dropped when decoded
with doubt and kept when said; a short text far too unsure of itself dropped."""

from __future__ import annotations

import pytest

from parley.core.quality import QualityGuards
from parley.core.stock_phrases import is_stock_phrase


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
