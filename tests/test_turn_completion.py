"""How finished a turn's text reads (core/turn_completion.py): what Whisper writes for
speech broken off mid-sentence (its texts, as tiny.en decoded bench/turns.py's
requests) against finished sentences, and the levels any text gets."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parley.core.turn_completion import CONTINUED, FINISHED, TRAILING, UNKNOWN, completion


@pytest.mark.parametrize(
    "text, level",
    [
        ("I would like to work a flight to", CONTINUED),  # a preposition, no full stop
        ("My account number is...", TRAILING),
        ("So I called yesterday because...", CONTINUED),  # the word, then the trail
        ("Let me check with my manager and-", CONTINUED),
        ("I'd like the blue one, please,", TRAILING),
        ("We need more time, and", CONTINUED),
        ("I want to cancel my", CONTINUED),
        ("Um, the", CONTINUED),
        ("I went to the.", CONTINUED),  # no sentence ends on an article, stop or not
        ("Can you tell me the balance?", FINISHED),
        ("Thank you very much.", FINISHED),
        ("What is it about?", FINISHED),
        ("That's what it's about.", FINISHED),  # a preposition can end a sentence
        ("I think so.", FINISHED),
        ('He said "stop."', FINISHED),
        ("w3 w5 w7", UNKNOWN),  # unpunctuated: cannot be judged
        ("", UNKNOWN),
    ],
)
def test_broken_off_speech_reads_unfinished_and_sentences_finished(text, level):
    assert completion(text) == level


def test_the_english_word_rules_are_for_english_only():
    assert completion("Je voudrais aller à la") == UNKNOWN
    assert completion("I want to cancel my", english=False) == UNKNOWN
    assert completion("Quiero ir a...", english=False) == TRAILING
    assert completion("¿Dónde está?", english=False) == FINISHED


@given(st.text(max_size=60), st.booleans())
def test_every_text_reads_at_one_of_the_levels(text, english):
    """Whatever a decode writes, one of the four levels; and a question or an
    exclamation after a word that can end a sentence reads finished."""
    assert completion(text, english) in (FINISHED, UNKNOWN, TRAILING, CONTINUED)
    assert completion(f"{text} okay?", english) == FINISHED
