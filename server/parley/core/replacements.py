"""Find and replace (Deepgram's ``replace``): words or phrases a caller wants written
otherwise in every result ("monika:Monica", "new year:Nguyen", "um:" to drop a word).

Each is ``find:replacement``, split at the first colon. A find matches whole words,
case and punctuation aside; at each place the longest find wins, left to right, and
what a replacement wrote is not searched again. The replaced words' times are shared
out among the replacement's words, and the last replaced word's sentence punctuation
stays. Replacements are made after keyterms are respelled and before redaction, so a
replacement that writes a number is redacted as any number is (pure).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from parley.core.keyterms import normalised
from parley.core.words import end_punctuation

MAX_REPLACEMENTS = 200  # Deepgram's suggested maximum
MAX_REPLACEMENT_CHARS = 100  # characters of one find:replacement

W = TypeVar("W")


@dataclass(frozen=True)
class Replacement:
    """One find (as normalised words) and what is written in its place."""

    find: str
    write: str

    @property
    def words(self) -> list[str]:
        return self.write.split()


def check_replacements(items: Iterable[str]) -> tuple[str, ...]:
    """The ``find:replacement`` items, each find normalised and each replacement's
    spaces made single, repeats of a find dropped (the first kept); ValueError for an
    item without a colon or a find, or past the bounds."""
    kept: dict[str, str] = {}
    for item in items:
        if len(item) > MAX_REPLACEMENT_CHARS:
            raise ValueError(
                f"a replacement has at most {MAX_REPLACEMENT_CHARS} characters: "
                f"{item[:20]!r}… has {len(item)}"
            )
        find, colon, write = item.partition(":")
        find = normalised(find)
        if not colon or not find:
            raise ValueError(f"a replacement is find:replacement, with a find; not {item!r}")
        kept.setdefault(find, " ".join(write.split()))
    if len(kept) > MAX_REPLACEMENTS:
        raise ValueError(f"at most {MAX_REPLACEMENTS} replacements; {len(kept)} were given")
    return tuple(f"{find}:{write}" for find, write in kept.items())


def replacements(items: Iterable[str]) -> tuple[Replacement, ...]:
    """Checked items (``check_replacements``) as ``Replacement``s."""
    return tuple(Replacement(*item.split(":", 1)) for item in items)


def replace_words(
    words: Sequence[W],
    rules: Sequence[Replacement],
    text_of: Callable[[W], str],
    made: Callable[[Sequence[W], list[str]], list[W]],
) -> list[W]:
    """``words`` with every run that a rule finds replaced by ``made(run, texts)``: the
    rule's words, the run's last sentence punctuation on the last of them (none when
    the replacement is empty: the run is dropped)."""
    if not rules or not words:
        return list(words)
    by_find = {rule.find: rule for rule in rules}
    longest = max(len(rule.find.split()) for rule in rules)
    keys = [normalised(text_of(w)) for w in words]
    out: list[W] = []
    i = 0
    while i < len(words):
        for n in range(min(longest, len(words) - i), 0, -1):
            rule = by_find.get(" ".join(k for k in keys[i : i + n] if k))
            if rule is not None and keys[i]:
                texts = rule.words
                if texts:
                    texts[-1] += end_punctuation(text_of(words[i + n - 1]))
                    out.extend(made(words[i : i + n], texts))
                i += n
                break
        else:
            out.append(words[i])
            i += 1
    return out


def replace_text(text: str, rules: Sequence[Replacement]) -> str:
    """``replace_words`` on a text's words (a partial's, or a final without word times)."""
    if not rules:
        return text
    return " ".join(replace_words(text.split(), rules, str, lambda _run, texts: texts))
