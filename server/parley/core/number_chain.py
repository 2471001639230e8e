"""A number read on across texts: a stream's finals or a recording's segments, in order.

A short pause ends a segment, so a card number read out in groups ("4539 … 1488 … 0343
… 6467") is several texts, none a card number by itself. ``NumberChain`` follows the
texts and tells each what its first and last number runs join (``Carry``): the digits
of the same number in the texts around it, and an expiry or security-code cue from the
text before (``core.card_cues``); ``core.redaction`` then judges each run by the whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from parley.core.card_cues import cue_open, cued_runs
from parley.core.redaction import (
    DIGITS,
    NO_CARRY,
    Carry,
    Redact,
    digits_of,
    is_amount,
    number_runs,
)

NUMBER_GAP_S = 2.0  # the longest pause between two groups of one number read out


@dataclass(frozen=True)
class NumberEdges:
    """The digits of the number run a text begins with (``lead``) and ends with
    (``tail``), which another text may read on; None where it begins or ends otherwise
    (an amount, with a currency or percent sign, is no such run); ``whole`` when one
    run is all the text."""

    lead: int | None
    tail: int | None
    whole: bool

    @classmethod
    def of(cls, words: Sequence[str], runs: Sequence[tuple[int, int]] | None = None) -> NumberEdges:
        """``runs``: the words' number runs, when they are already known."""
        runs = [
            r
            for r in (number_runs(words) if runs is None else runs)
            if not is_amount(words[r[0] : r[1]], read_on=True)
        ]
        lead = next((digits_of(words[a:b]) for a, b in runs if a == 0), None)
        tail = next((digits_of(words[a:b]) for a, b in runs if b == len(words)), None)
        return cls(lead, tail, runs == [(0, len(words))])


T = TypeVar("T")


@dataclass
class _Held(Generic[T]):
    item: T
    before: int  # the digits its first run joins (``Carry.before``)
    at: int  # the number's digits before those it adds
    adds: int  # the digits it adds to the number (its last run's, or all of it)
    cued: bool  # ``Carry.cued``


class NumberChain(Generic[T]):
    """Texts in order (a stream's finals, a recording's segments), each released with the
    ``Carry`` its edge runs join. A text that ends in a number which could still grow
    into a redacted one waits: if the next text begins with a number within ``gap_s``
    of it, that is the same number read on, and every part of it is judged by the whole
    number's digits. Texts leave as soon as no later text can change their verdict (a
    card number's 12 digits are a card however it goes on), and the number stays open
    for the next. Only ``pci``, ``ssn`` and ``phone`` chain (``numbers`` takes every run
    anyway)."""

    def __init__(self, categories: frozenset[Redact], gap_s: float = NUMBER_GAP_S):
        self.categories = categories
        self._counted = [] if Redact.NUMBERS in categories else [c for c in categories]
        self._gap_s = gap_s
        self._held: list[_Held[T]] = []
        self._digits = 0  # the open number's digits so far
        self._end: float | None = None  # where the open number was last read; None: none
        self._cue_end: float | None = None  # where a text ended with an open cue
        self._number_cued = False  # a cue named the open number's first run

    @property
    def held_until(self) -> float | None:
        """The end of the newest text waiting, or None when none waits."""
        return self._end if self._held else None

    def continues(self, start: float) -> bool:
        """Whether a text starting at ``start`` may read on the open number."""
        return self._end is not None and start - self._end <= self._gap_s

    def carry_into(self, start: float, words: Sequence[str]) -> Carry:
        """What the first run of ``words``, a text starting at ``start``, would join."""
        reads_on = self.continues(start) and self._number_cued  # only then the words matter
        return self._carry(start, NumberEdges.of(words).lead if reads_on else None)

    def _carry(self, start: float, lead: int | None) -> Carry:
        """``carry_into`` for a text whose first run holds ``lead`` digits (None: none)."""
        continues = self.continues(start)
        cued = self._cue_end is not None and start - self._cue_end <= self._gap_s
        reads_on = continues and self._number_cued and lead is not None
        return Carry(self._digits if continues else 0, 0, cued or reads_on)

    def push(
        self, item: T, words: Sequence[str], start: float, end: float
    ) -> list[tuple[T, Carry, bool]]:
        """The texts this one releases, each with its carry and whether it is judged with
        an open end (see ``close``); ``item`` among them unless it now waits."""
        if not self._counted:
            return [(item, NO_CARRY, False)]  # nothing here is judged by its digits
        runs, pci = number_runs(words), Redact.PCI in self._counted
        edges = NumberEdges.of(words, runs)
        cued = self._carry(start, edges.lead).cued
        self._cue_end = end if pci and cue_open(words, runs, cued) else None
        tail_cued = pci and any(b == len(words) for _, b in cued_runs(words, runs, cued))
        before = 0
        if edges.lead is not None and self.continues(start):
            if edges.whole:  # all number: the number goes on through it
                held = _Held(item, self._digits, self._digits, edges.lead, cued)
                self._held.append(held)
                self._digits += edges.lead
                self._end = end
                return self._settled()
            before = self._digits
            self._digits += edges.lead
        out = self.close()  # judged by the digits so far (with this text's first run)
        if edges.tail is not None and self._growing(edges.tail):
            self._held = [_Held(item, before, 0, edges.tail, cued)]
            self._digits, self._end, self._number_cued = edges.tail, end, tail_cued
            return out + self._settled()
        return [*out, (item, Carry(before, 0, cued), False)]

    def close(self, open_end: bool = False) -> list[tuple[T, Carry, bool]]:
        """Release every waiting text, judged by the digits so far, and end the number;
        ``open_end``: it may still go on where nothing can tell (the last text is judged
        as a partial is)."""
        out = self._release(open_end)
        self._digits, self._end = 0, None
        return out

    def _settled(self) -> list[tuple[T, Carry, bool]]:
        if not self._growing(self._digits):
            return self.close()  # too long for any category asked: done
        if Redact.PCI in self._counted and self._digits >= DIGITS[Redact.PCI].start:
            return self._release()  # a card whatever follows: the number stays open
        return []

    def _release(self, open_end: bool = False) -> list[tuple[T, Carry, bool]]:
        last = len(self._held) - 1
        out = [
            (
                held.item,
                Carry(held.before, self._digits - held.at - held.adds, held.cued),
                open_end and i == last,
            )
            for i, held in enumerate(self._held)
        ]
        self._held = []
        return out

    def _growing(self, digits: int) -> bool:
        return any(digits < DIGITS[c].stop for c in self._counted)
