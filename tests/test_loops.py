"""The rule a looping decode's second attempt is held to (``core.quality.repeat_bans``,
``AsrRequest.no_repeat``), pure: a token is forbidden exactly when it would write a run
of n tokens a second time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from parley.core.quality import repeat_bans


def runs(tokens: list[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


@given(st.lists(st.integers(0, 4), max_size=30), st.integers(1, 5), st.integers(0, 4))
def test_a_token_is_banned_exactly_when_it_would_write_a_run_twice(tokens, n, token):
    again = tuple((tokens + [token])[-n:]) in runs(tokens, n)
    assert (token in repeat_bans(tokens, n)) == again


@given(st.lists(st.integers(0, 3), max_size=40), st.integers(1, 4))
def test_text_written_around_the_bans_never_repeats_a_run(wanted, n):
    written: list[int] = []
    for token in wanted:
        if token not in repeat_bans(written, n):
            written.append(token)
    assert len(set(runs(written, n))) == len(runs(written, n))


def test_no_rule_bans_nothing():
    assert repeat_bans([1, 1, 1, 1], 0) == set()
    assert repeat_bans([7, 8, 9, 7, 8], 3) == {9}
    assert repeat_bans([5], 1) == {5}
