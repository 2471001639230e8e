"""Spoken punctuation written as its mark (Deepgram's ``dictation``): "a headache comma
nausea period they left" is written "a headache, nausea. They left" (pure).

Whisper writes a dictated command as a word, often with punctuation of its own around
it ("headache, comma, nausea", "ago. Period. They"), so a command's mark takes the
place of whatever punctuation ends the word before it, and the command's own is
dropped. After a sentence's mark the next word begins with a capital.

A command said as a noun stays a word: after a determiner ("a period", "the colon",
"each comma") or before "of" ("period of time"). A command that begins a final has no
word of that final to follow: its mark is written as a word of its own (the word before
it is in a final already sent). English only, as Deepgram's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TypeVar

# Each command's letters (its words run together, case and punctuation aside) → its mark.
MARKS: dict[str, str] = {
    "comma": ",",
    "period": ".",
    "fullstop": ".",
    "questionmark": "?",
    "exclamationpoint": "!",
    "exclamationmark": "!",
    "colon": ":",
    "semicolon": ";",
}
LONGEST = 2  # words one command spans ("full stop", "question mark")
SENTENCE_MARKS = frozenset(".?!")
# A command right after one of these is a noun ("a period of calm", "the colon").
DETERMINERS = frozenset(
    "a an the this that these those each every one per no any its his her their our my your".split()
)
NOUN_AFTER = frozenset({"of"})  # "period of", "colon of"
TRAILING = ".,!?;:…"  # the punctuation a command's mark replaces

_NOT_LETTERS = re.compile(r"[^a-z]")

W = TypeVar("W")


def _letters(word: str) -> str:
    return _NOT_LETTERS.sub("", word.lower())


def command_at(texts: Sequence[str], i: int) -> tuple[int, str] | None:
    """The command that begins at ``texts[i]``: how many words it spans and its mark;
    None where there is none, or where it is said as a noun."""
    for span in range(LONGEST, 0, -1):
        if i + span > len(texts):
            continue
        mark = MARKS.get("".join(_letters(t) for t in texts[i : i + span]))
        if mark is None:
            continue
        before = _letters(texts[i - 1]) if i > 0 else ""
        after = _letters(texts[i + span]) if i + span < len(texts) else ""
        if before in DETERMINERS or after in NOUN_AFTER:
            return None
        return span, mark
    return None


def capitalised(word: str) -> str:
    """``word`` with its first letter upper case (a quote before it kept)."""
    for k, char in enumerate(word):
        if char.isalpha():
            return word[:k] + char.upper() + word[k + 1 :]
    return word


def dictate(
    words: Sequence[W], text_of: Callable[[W], str], joined: Callable[[Sequence[W], str], W]
) -> list[W]:
    """``words`` with each command written as its mark (``joined(run, text)``: one word
    with that text over the run's times). A mark joins the word before it, whose times
    stay its own; a command with no word before it becomes its mark alone."""
    texts = [text_of(w) for w in words]
    out: list[W] = []
    capital = False
    i = 0
    while i < len(words):
        found = command_at(texts, i)
        if found is None:
            word = words[i]
            if capital and texts[i] != capitalised(texts[i]):
                word = joined([word], capitalised(texts[i]))
            out.append(word)
            capital = False
            i += 1
            continue
        span, mark = found
        if out:
            out[-1] = joined([out[-1]], text_of(out[-1]).rstrip(TRAILING) + mark)
        else:
            out.append(joined(words[i : i + span], mark))
        capital = mark in SENTENCE_MARKS
        i += span
    return out


def dictate_text(text: str) -> str:
    """A text's words (a partial's, or a final without word times) with each command
    written as its mark."""
    return " ".join(dictate(text.split(), str, lambda run, mark: mark))
