"""Search (protocol.md section 9, Deepgram's ``search``): hits in the words written,
how alike, bounded."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parley.core.search import (
    MAX_SEARCHES,
    MIN_CONFIDENCE,
    Hit,
    SearchWord,
    check_searches,
    search,
)


def spoken(text: str) -> list[SearchWord]:
    """The words of ``text``, half a second each."""
    return [SearchWord(w, i * 0.5, i * 0.5 + 0.4) for i, w in enumerate(text.split())]


def test_a_query_is_found_where_the_words_hold_it_or_something_like_it():
    words = spoken("Please restart the next cloud share before noon, then restart it.")
    assert search(words, ["restart", "Nextcloud", "Before Noon", "epistemology"]) == [
        [Hit(1.0, 0.5, 0.9, "restart"), Hit(1.0, 4.5, 4.9, "restart")],
        [Hit(1.0, 1.5, 2.4, "next cloud")],
        [Hit(1.0, 3.0, 3.9, "before noon")],
        [],
    ]
    assert search(spoken("I went to the store."), ["stone"]) == [[Hit(0.8, 2.0, 2.4, "store")]]
    assert search([], ["stone"]) == [[]] and search(words, []) == []


@given(st.lists(st.sampled_from(["the", "store", "some", "bread", "milk", "and"]), max_size=15))
def test_hits_never_overlap_and_come_most_alike_first(texts):
    words = spoken(" ".join(texts))
    (hits,) = search(words, ["stone bread"])
    assert [h.confidence for h in hits] == sorted((h.confidence for h in hits), reverse=True)
    assert all(MIN_CONFIDENCE <= h.confidence <= 1.0 for h in hits)
    spans = sorted((h.start, h.end) for h in hits)
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:]))


def test_searches_are_checked_and_bounded():
    assert check_searches([" before  noon ", "", "before noon", "restart"]) == (
        "before noon",
        "restart",
    )
    with pytest.raises(ValueError, match="at most 50 searches"):
        check_searches([f"w{i}" for i in range(MAX_SEARCHES + 1)])
    with pytest.raises(ValueError, match="at most 100 characters"):
        check_searches(["x" * 101])
