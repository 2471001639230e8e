"""Find and replace (protocol.md section 3a, Deepgram's ``replace``): whole words, the
longest find first, times shared out, bounded; made in finals and partials alike."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fake_engine import FakeEngine
from parley.core.replacements import (
    MAX_REPLACEMENTS,
    check_replacements,
    replace_text,
    replacements,
)
from parley.protocol.messages import StreamConfig, Word
from parley.workers.decoding import StreamDecoding


def replaced(text: str, *items: str) -> str:
    return replace_text(text, replacements(check_replacements(items)))


@pytest.mark.parametrize(
    "text, items, want",
    [
        (
            "Send it to New Year in accounting.",
            ["new year:Nguyen"],
            "Send it to Nguyen in accounting.",
        ),
        ("monika called Monika.", ["Monika:Monica"], "Monica called Monica."),
        ("the new yearly plan", ["new year:Nguyen"], "the new yearly plan"),  # whole words
        ("the new-year plan", ["new year:Nguyen"], "the Nguyen plan"),  # punctuation aside
        ("um, I think, um, yes", ["um:"], "I think, yes"),  # an empty replacement drops
        ("new york and new jersey", ["new:old", "new york:NYC"], "NYC and old jersey"),
        ("a b", ["a:b", "b:c"], "b c"),  # what a replacement wrote is not searched again
        ("call me at five", ["five:5 o'clock"], "call me at 5 o'clock"),
    ],
)
def test_replacements_are_whole_words_the_longest_find_first(text, items, want):
    assert replaced(text, *items) == want


WORDS = st.sampled_from(["a", "b", "new", "year", "Monika", "um"])


@given(
    st.lists(WORDS, max_size=12),
    st.lists(st.lists(WORDS, min_size=1, max_size=3), max_size=4),
)
def test_a_find_written_as_itself_changes_nothing(words, finds):
    """The matching keeps every word, in order: finds replaced by themselves leave any
    text as it was."""
    items = [f"{' '.join(f).lower()}:{' '.join(f).lower()}" for f in finds]
    text = " ".join(w.lower() for w in words)
    assert replaced(text, *items) == text


def test_replacements_are_checked_and_bounded():
    assert check_replacements(["  New  Year :  Nguyen  Van ", "new year:other"]) == (
        "new year:Nguyen Van",
    )
    for items, fragment in [
        (["nocolon"], "find:replacement"),
        ([":Monica"], "with a find"),
        ([f"w{i}:x" for i in range(MAX_REPLACEMENTS + 1)], "at most 200"),
        (["a:" + "x" * 100], "at most 100 characters"),
    ]:
        with pytest.raises(ValueError, match=fragment):
            check_replacements(items)


def test_a_stream_gets_replaced_words_with_the_runs_time_shared():
    """Two words found become the replacement's words, the run's time shared evenly,
    its probability the least sure, its sentence punctuation on the last; after the
    keyterms' respelling; partials too, and a final without word times by its text."""
    config = StreamConfig(
        keyterms=("Alembic",), replace=check_replacements(["new year:Nguyen Van"])
    )
    decoding = StreamDecoding.of(config, FakeEngine())
    words = [
        Word("Ask", 0.0, 0.2, 0.9),
        Word("new", 0.2, 0.4, 0.8),
        Word("year.", 0.4, 0.8, 0.6),
        Word("a", 1.0, 1.1, 0.4),
        Word("limbic.", 1.1, 1.4, 0.5),
    ]
    out = decoding.respelled(words)
    assert out == [
        Word("Ask", 0.0, 0.2, 0.9),
        Word("Nguyen", 0.2, 0.5, 0.6),
        Word("Van.", 0.5, 0.8, 0.6),
        Word("Alembic.", 1.0, 1.4, 0.4),
    ]
    assert decoding.text("unused", out) == "Ask Nguyen Van. Alembic."
    assert decoding.text("Ask new year.", []) == "Ask Nguyen Van."
    assert decoding.partial_text("Ask new year") == "Ask Nguyen Van"


def test_predict_takes_replace_as_a_list_of_strings():
    """``/predict``'s ``parameters`` carry Parley's own ``replace`` as keyterms are
    carried; anything but a list of strings is a 400."""
    from parley.transport.predict_parameters import predict_decoding
    from parley.transport.upload_errors import UploadError

    assert predict_decoding({"replace": ["monika:Monica"]})["replace"] == ("monika:Monica",)
    with pytest.raises(UploadError, match="replace and languages must be lists of strings"):
        predict_decoding({"replace": "monika:Monica"})
