"""Search (Deepgram's ``search``): where a result's words hold a term or phrase, and how
alike they are (pure).

Deepgram searches the audio itself; Parley searches the words the model wrote. A run of
as many words as the query (one more or one fewer) is a hit when its letters are at
least ``MIN_CONFIDENCE`` alike the query's (rapidfuzz's ratio, case, spaces and
punctuation aside): "next cloud" is a hit for "Nextcloud" at 1.0, "store" for "stone"
at 0.8. Hits do not overlap: at each place the most alike run
wins, and a query's hits are listed most alike first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from rapidfuzz.fuzz import ratio
from rapidfuzz.process import cdist

from parley.core.keyterms import letters_of

MAX_SEARCHES = 50  # Deepgram's limit
MAX_SEARCH_CHARS = 100  # characters of one query
# Hits below this are not listed: letters this alike are as often chance as the query
# ("some" is 0.67 alike "stone", "to the" 0.6).
MIN_CONFIDENCE = 0.7


@dataclass(frozen=True)
class SearchWord:
    """A word as search reads it: its text and times."""

    text: str
    start: float
    end: float


@dataclass(frozen=True)
class Hit:
    """One place a query was found: how alike, when, and the words found."""

    confidence: float
    start: float
    end: float
    snippet: str


def check_searches(queries: Iterable[str]) -> tuple[str, ...]:
    """The queries, spaces made single, empty ones and repeats dropped; ValueError past
    the bounds."""
    kept: list[str] = []
    for query in queries:
        query = " ".join(query.split())
        if len(query) > MAX_SEARCH_CHARS:
            raise ValueError(f"a search has at most {MAX_SEARCH_CHARS} characters: {query[:20]!r}…")
        if query and query not in kept:
            kept.append(query)
    if len(kept) > MAX_SEARCHES:
        raise ValueError(f"at most {MAX_SEARCHES} searches; {len(kept)} were given")
    return tuple(kept)


def search(words: Sequence[SearchWord], queries: Sequence[str]) -> list[list[Hit]]:
    """Each query's hits in ``words``, most alike first. Every run of words is scored
    against every query in one rapidfuzz call: this runs on the event loop, for each
    result, and 50 queries over a long final took 13 ms one query at a time (under 1 ms
    so)."""
    wanted = [letters_of(q) for q in queries]
    sizes = [len(q.split()) for q in queries]
    found: list[list[Hit]] = [[] for _ in queries]
    letters = [letters_of(w.text) for w in words]
    longest = max(sizes, default=0) + 1
    runs = [
        (start, end)
        for start in range(len(words))
        if letters[start]
        for end in range(start + 1, min(start + longest, len(words)) + 1)
    ]
    if not runs or not any(wanted):
        return found
    scores = cdist(
        ["".join(letters[a:b]) for a, b in runs],
        wanted,
        scorer=ratio,
        score_cutoff=100 * MIN_CONFIDENCE,
    )
    for k, hits in enumerate(found):
        low, high = max(1, sizes[k] - 1), sizes[k] + 1
        best: dict[int, tuple[float, int]] = {}  # a run's start: its most alike length
        for r in np.flatnonzero(scores[:, k]) if wanted[k] else ():
            start, end = runs[r]
            score = float(scores[r, k]) / 100
            if low <= end - start <= high and (start not in best or score > best[start][0]):
                best[start] = (score, end)
        taken: set[int] = set()
        for start, (score, end) in sorted(best.items(), key=lambda c: (-c[1][0], c[0])):
            if taken.intersection(range(start, end)):
                continue
            taken.update(range(start, end))
            run = words[start:end]
            snippet = " ".join(w.text for w in run).rstrip(".,!?;:")
            hits.append(Hit(round(score, 3), run[0].start, run[-1].end, snippet))
    return found
