"""Redaction and numerals for telephony: what a final says before it leaves the server.

Whisper writes a spoken card number as digits ("4111 1111 1111 1111") or as words
("four one one one …"), so a *number run* is found over words: consecutive words that
are digits or number words, punctuation between them allowed. A run is then known by
how many digits it holds (text2num reads the number words): 12 or more a card number
(``pci``), 8 to 10 a social security number (``ssn``), 7 to 12 a phone number
(``phone``); ``numbers`` takes every run. The ranges are wider than the numbers
themselves (16, 9, 10) because the recogniser drops or repeats a digit of a long
spoken number now and then (bench/vocabulary.py), and a number let through is worse
than one redacted too many; a run written as an amount ($, %, a decimal point) is
not a card, an SSN or a phone number. A redacted run becomes one word,
``[redacted]``, timed from the run's first word to its last. ``numerals`` writes number
words as digits ("twenty one" → "21"), as Deepgram's option does.

A number read out in groups ("4539 … 1488 … 0343 … 6467") reaches the recogniser as
several segments, since a short pause ends one, so a run may go on in the next text:
``NumberChain`` follows texts in order and tells each the digits its first and last
runs join (``Carry``), and a run is judged by the whole number's digits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

from text_to_num import alpha2digit

from parley.core.words import end_punctuation

REDACTED = "[redacted]"


class Redact(str, Enum):
    """The kinds of number runs ``redact`` may hide (protocol.md section 3a)."""

    PCI = "pci"  # card numbers
    SSN = "ssn"  # US social security numbers
    PHONE = "phone"  # phone numbers
    NUMBERS = "numbers"  # every number


NUMBER_GAP_S = 2.0  # the longest pause between two groups of one number read out
DIGITS = {Redact.PCI: range(12, 10_000), Redact.SSN: range(8, 11), Redact.PHONE: range(7, 13)}
_CURRENCY = re.compile(r"[$%€£]")
_AMOUNT = re.compile(r"[$%€£]|\d\.\d")
_NUMBER_WORDS = frozenset(
    "zero oh one two three four five six seven eight nine ten eleven twelve thirteen "
    "fourteen fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty "
    "seventy eighty ninety hundred thousand million".split()
)
_EDGE = re.compile(r"^[^\w$#+]+|[^\w%]+$")  # punctuation around a word
_DIGITAL = re.compile(r"^[$#+]?\d[\d\-./,:]*%?$")  # 4111, 4111-1111, 555-0123, $20


def parse_redact(values: Iterable[str]) -> frozenset[Redact]:
    """Categories by name; ValueError for one that is not a category."""
    out = set()
    for value in values:
        try:
            out.add(Redact(value.strip().lower()))
        except ValueError:
            choices = ", ".join(r.value for r in Redact)
            raise ValueError(f"redact takes {choices}; not {value!r}") from None
    return frozenset(out)


def _core(word: str) -> str:
    return _EDGE.sub("", word).lower()


def _is_number_word(word: str) -> bool:
    core = _core(word)
    return (
        bool(_DIGITAL.match(core))
        or all(part in _NUMBER_WORDS for part in core.split("-") if part)
        and bool(core)
    )


def _as_digits(words: Sequence[str]) -> str:
    """The run's words as text2num writes them ("oh" is a zero in a run of digits; a
    lone "zero", "one" or "two", which text2num leaves as words by default, a digit)."""
    spoken = " ".join("zero" if _core(w) == "oh" else _core(w) for w in words)
    return alpha2digit(spoken, "en", threshold=0)


def number_runs(words: Sequence[str]) -> list[tuple[int, int]]:
    """``[start, end)`` word ranges of consecutive numbers (a lone "oh" is not one)."""
    runs, start = [], None
    for i, word in enumerate([*words, ""]):
        if word and _is_number_word(word):
            if start is None:
                start = i
            continue
        if start is not None:
            if not (i - start == 1 and _core(words[start]) == "oh"):
                runs.append((start, i))
            start = None
    return runs


@dataclass(frozen=True)
class Carry:
    """Digits of one number that runs on across texts: ``before`` the text's first run
    (from the texts before it), ``after`` its last run (from the texts after it)."""

    before: int = 0
    after: int = 0


NO_CARRY = Carry()


def _digits(words: Sequence[str]) -> int:
    return sum(ch.isdigit() for ch in _as_digits(words))


def _is_amount(words: Sequence[str], read_on: bool = False) -> bool:
    """Whether a run is written as an amount. A run that reads on a number from another
    text is one only with a currency or percent sign: the recogniser writes a group of
    digits read after a pause as "0.0530" or "4.5" now and then."""
    return bool((_CURRENCY if read_on else _AMOUNT).search(" ".join(words)))


def redacted_runs(
    words: Sequence[str],
    categories: frozenset[Redact],
    open_end: bool = False,
    carry: Carry = NO_CARRY,
) -> list[tuple[int, int]]:
    """The number runs that ``categories`` redact, each counted with the digits
    ``carry`` says it joins. With ``open_end`` (a partial: the speaker may be in the
    middle of a number), a run that ends the words is redacted while it may still grow
    into one of them: a card number's first eight digits are not a card number yet,
    and must not leave the server either."""
    if not categories:
        return []
    runs = number_runs(words)
    if Redact.NUMBERS in categories:
        return runs
    out = []
    for start, end in runs:
        joined = (carry.before if start == 0 else 0) + (carry.after if end == len(words) else 0)
        count = _digits(words[start:end]) + joined
        growing = open_end and end == len(words)
        if not _is_amount(words[start:end], read_on=joined > 0) and any(
            count in DIGITS[c] or (growing and count < DIGITS[c].stop) for c in categories
        ):
            out.append((start, end))
    return out


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
    def of(cls, words: Sequence[str]) -> NumberEdges:
        runs = [r for r in number_runs(words) if not _is_amount(words[r[0] : r[1]], read_on=True)]
        lead = next((_digits(words[a:b]) for a, b in runs if a == 0), None)
        tail = next((_digits(words[a:b]) for a, b in runs if b == len(words)), None)
        return cls(lead, tail, runs == [(0, len(words))])


T = TypeVar("T")


@dataclass
class _Held(Generic[T]):
    item: T
    before: int  # the digits its first run joins (``Carry.before``)
    at: int  # the number's digits before those it adds
    adds: int  # the digits it adds to the number (its last run's, or all of it)


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

    @property
    def held_until(self) -> float | None:
        """The end of the newest text waiting, or None when none waits."""
        return self._end if self._held else None

    def continues(self, start: float) -> bool:
        """Whether a text starting at ``start`` may read on the open number."""
        return self._end is not None and start - self._end <= self._gap_s

    def carried(self, start: float) -> int:
        """The digits a text starting at ``start`` would join at its first run."""
        return self._digits if self.continues(start) else 0

    def push(
        self, item: T, words: Sequence[str], start: float, end: float
    ) -> list[tuple[T, Carry, bool]]:
        """The texts this one releases, each with its carry and whether it is judged with
        an open end (see ``close``); ``item`` among them unless it now waits."""
        if not self._counted:
            return [(item, NO_CARRY, False)]  # nothing here is judged by its digits
        edges = NumberEdges.of(words)
        before = 0
        if edges.lead is not None and self.continues(start):
            if edges.whole:  # all number: the number goes on through it
                self._held.append(_Held(item, self._digits, self._digits, edges.lead))
                self._digits += edges.lead
                self._end = end
                return self._settled()
            before = self._digits
            self._digits += edges.lead
        out = self.close()  # judged by the digits so far (with this text's first run)
        if edges.tail is not None and self._growing(edges.tail):
            self._held = [_Held(item, before, 0, edges.tail)]
            self._digits, self._end = edges.tail, end
            return out + self._settled()
        return [*out, (item, Carry(before, 0), False)]

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
                Carry(held.before, self._digits - held.at - held.adds),
                open_end and i == last,
            )
            for i, held in enumerate(self._held)
        ]
        self._held = []
        return out

    def _growing(self, digits: int) -> bool:
        return any(digits < DIGITS[c].stop for c in self._counted)


W = TypeVar("W")


def rewrite(
    words: Sequence[W],
    text_of: Callable[[W], str],
    join: Callable[[Sequence[W], str], W],
    categories: frozenset[Redact],
    numerals: bool,
    open_end: bool = False,
    carry: Carry = NO_CARRY,
) -> list[W]:
    """``words`` with each redacted run made one ``[redacted]`` word and, with
    ``numerals``, each other run's number words written as digits. ``join(run, text)``
    makes one word of a run (keeping its times); the run's last punctuation stays.
    ``open_end`` and ``carry`` as in ``redacted_runs``."""
    texts = [text_of(w) for w in words]
    redacted = set(redacted_runs(texts, categories, open_end, carry))
    runs = number_runs(texts) if numerals else sorted(redacted)
    out: list[W] = []
    at = 0
    for start, end in sorted(set(runs) | redacted):
        out.extend(words[at:start])
        trailing = end_punctuation(texts[end - 1])
        if (start, end) in redacted:
            out.append(join(words[start:end], REDACTED + trailing))
        else:
            written = alpha2digit(" ".join(texts[start:end]), "en").split()
            if len(written) == end - start:
                out.extend(join([w], t) for w, t in zip(words[start:end], written))
            else:
                out.append(join(words[start:end], " ".join(written)))
        at = end
    out.extend(words[at:])
    return out


def rewrite_text(text: str, categories: frozenset[Redact], numerals: bool, before: int = 0) -> str:
    """A text without word times (a partial's, whose speaker may be mid-number: its
    last run is redacted while it may still grow into a redacted one) rewritten as
    ``rewrite`` does; ``before``: digits its first run joins (``Carry``)."""
    words = text.split()
    return " ".join(
        rewrite(words, str, lambda run, t: t, categories, numerals, True, Carry(before))
    )
