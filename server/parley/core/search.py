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

from rapidfuzz.fuzz import ratio

from parley.core.keyterms import normalised

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


def _letters(text: str) -> str:
    return normalised(text).replace(" ", "")


def search(words: Sequence[SearchWord], query: str) -> list[Hit]:
    """The hits of ``query`` in ``words``, most alike first."""
    wanted = _letters(query)
    if not wanted or not words:
        return []
    size = len(query.split())
    letters = [_letters(w.text) for w in words]
    candidates: list[tuple[float, int, int]] = []
    for start in range(len(words)):
        if not letters[start]:
            continue
        best: tuple[float, int] | None = None
        for n in range(max(1, size - 1), size + 2):
            end = start + n
            if end > len(words):
                break
            score = ratio("".join(letters[start:end]), wanted) / 100
            if score >= MIN_CONFIDENCE and (best is None or score > best[0]):
                best = (score, end)
        if best is not None:
            candidates.append((best[0], start, best[1]))
    taken: set[int] = set()
    hits: list[Hit] = []
    for score, start, end in sorted(candidates, key=lambda c: (-c[0], c[1])):
        if taken.intersection(range(start, end)):
            continue
        taken.update(range(start, end))
        run = words[start:end]
        snippet = " ".join(w.text for w in run).rstrip(".,!?;:")
        hits.append(Hit(round(score, 3), run[0].start, run[-1].end, snippet))
    return hits
