"""A card's expiry date and security code, which ``pci`` redacts with its number, as
Deepgram's ``pci`` does.

Neither is known by its digits: four digits are as often a year, a time or a count.
They are known by the words said before them. A number run is cued when it begins at
most ``CUE_REACH`` words after a cue ("it expires 09/27", "the expiry date is oh nine
twenty seven", "the security code on the back is 412"), and a month name between the
cue and the run goes with it ("expires September 2027"). A pause after "it expires"
ends a segment, so a cue that ends a text, with no run after it, reaches into the next
(``cue_open``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

CUE_REACH = 5  # words from a cue's end to the start of the run it names

_CUES: tuple[tuple[str, ...], ...] = tuple(
    tuple(cue.split())
    for cue in (
        "expires",
        "expire",
        "expired",
        "expiring",
        "expiry",
        "expiration",
        "exp",
        "valid through",
        "valid thru",
        "valid until",
        "good through",
        "good thru",
        "cvv",
        "cvv2",
        "cvc",
        "cvc2",
        "cv2",
        "csc",
        "c v v",
        "c v c",
        "security code",
        "security number",
        "verification code",
        "verification number",
        "verification value",
    )
)
_MONTHS = frozenset(
    "january february march april may june july august september october november "
    "december jan feb mar apr jun jul aug sep sept oct nov dec".split()
)
_NOT_LETTERS = re.compile(r"[^a-z0-9]")


def _plain(word: str) -> str:
    return _NOT_LETTERS.sub("", word.lower())  # "C.V.V." → "cvv", "expires," → "expires"


def _cue_ends(words: Sequence[str]) -> list[int]:
    """The index just past each cue in ``words``."""
    plain = [_plain(w) for w in words]
    return [
        i + len(cue)
        for i in range(len(plain))
        for cue in _CUES
        if tuple(plain[i : i + len(cue)]) == cue
    ]


def cued_runs(
    words: Sequence[str], runs: Sequence[tuple[int, int]], cued: bool
) -> list[tuple[int, int]]:
    """The ``runs`` a cue names, each widened back to a month name between the cue and
    it; ``cued``: the text before this one ended with a cue that reaches into it."""
    ends = _cue_ends(words) + ([0] if cued else [])
    out = []
    for start, end in runs:
        reaching = [e for e in ends if e <= start <= e + CUE_REACH]
        if not reaching:
            continue
        months = [i for i in range(max(reaching), start) if _plain(words[i]) in _MONTHS]
        out.append((min(months, default=start), end))
    return out


def cue_open(words: Sequence[str], runs: Sequence[tuple[int, int]], cued: bool) -> bool:
    """Whether a cue still reaches past the end of ``words``: one within ``CUE_REACH``
    words of the end with no run after it (the number it names may be the next text's)."""
    ends = _cue_ends(words) + ([0] if cued else [])
    if not ends:
        return False
    last = max(ends)
    return len(words) - last <= CUE_REACH and not any(start >= last for start, _ in runs)
