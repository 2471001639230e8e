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
not a card, an SSN or a phone number. With ``pci``, a run that an expiry or
security-code cue names is redacted whatever its digits (``core.card_cues``). A
redacted run becomes one word, ``[redacted]``, timed from the run's first word to its
last. ``numerals`` writes number words as digits ("twenty one" → "21"), as Deepgram's
option does.

A number read out in groups ("4539 … 1488 … 0343 … 6467") reaches the recogniser as
several segments, since a short pause ends one, so a run may go on in the next text:
``core.number_chain`` follows texts in order and tells each what its first and last
runs join (``Carry``), and a run is judged by the whole number's digits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from text_to_num import alpha2digit

from parley.core.card_cues import cued_runs
from parley.core.words import end_punctuation

REDACTED = "[redacted]"


class Redact(str, Enum):
    """The kinds of number runs ``redact`` may hide (protocol.md section 3a)."""

    PCI = "pci"  # card numbers
    SSN = "ssn"  # US social security numbers
    PHONE = "phone"  # phone numbers
    NUMBERS = "numbers"  # every number


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
    """What a text's edges join in the texts around it: the digits of one number that
    runs on across texts, ``before`` its first run (from the texts before it) and
    ``after`` its last run (from the texts after it); ``cued``: the text before it ended
    with an expiry or security-code cue that reaches into it (``core.card_cues``)."""

    before: int = 0
    after: int = 0
    cued: bool = False


NO_CARRY = Carry()


def digits_of(words: Sequence[str]) -> int:
    """How many digits a run of words holds (text2num reads the number words)."""
    return sum(ch.isdigit() for ch in _as_digits(words))


def is_amount(words: Sequence[str], read_on: bool = False) -> bool:
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
    and must not leave the server either. With ``pci``, a run an expiry or security-code
    cue names is redacted whatever its digits (``core.card_cues``), with a month name
    between them. The spans returned do not overlap."""
    if not categories:
        return []
    runs = number_runs(words)
    if Redact.NUMBERS in categories:
        return runs
    cued = cued_runs(words, runs, carry.cued) if Redact.PCI in categories else []
    out = list(cued)
    for start, end in runs:
        if any(a <= start < b for a, b in cued):
            continue
        joined = (carry.before if start == 0 else 0) + (carry.after if end == len(words) else 0)
        count = digits_of(words[start:end]) + joined
        growing = open_end and end == len(words)
        if not is_amount(words[start:end], read_on=joined > 0) and any(
            count in DIGITS[c] or (growing and count < DIGITS[c].stop) for c in categories
        ):
            out.append((start, end))
    return sorted(out)


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
    written_out = [
        (start, end)
        for start, end in (number_runs(texts) if numerals else [])
        if not any(a < end and start < b for a, b in redacted)  # a redacted span holds it
    ]
    out: list[W] = []
    at = 0
    for start, end in sorted(set(written_out) | redacted):
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


def rewrite_text(
    text: str, categories: frozenset[Redact], numerals: bool, carry: Carry = NO_CARRY
) -> str:
    """A text without word times (a partial's, whose speaker may be mid-number: its
    last run is redacted while it may still grow into a redacted one) rewritten as
    ``rewrite`` does; ``carry``: what its first run joins."""
    words = text.split()
    return " ".join(rewrite(words, str, lambda run, t: t, categories, numerals, True, carry))
