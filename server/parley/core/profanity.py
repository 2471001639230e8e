"""Profanity masked in what the server writes (Deepgram's ``profanity_filter``,
AssemblyAI's ``filter_profanity``): a profane word keeps its first letter and its
other letters become asterisks ("shit's" → "s***'s", "Fucking!" → "F******!"), its
punctuation, case and an apostrophe's ending kept, so a reader still sees that a word
was said and where (pure).

English only, and a short list of its own: the word lists the registry's profanity
packages carry (better-profanity's among them) also flag "god", "kill", "hell",
"screw" and "sex", words a support call says plainly; masking those would hide what
was said. Here a word is profane when it is one of ``WORDS`` (with a plural or
plural ending), begins with one of ``STEMS`` (their inflections: "fucking",
"shitty"), or holds "fuck" or "shit" anywhere ("motherfucker", "bullshit"). The
words in ``NAMES_TOO`` are also names or plain words ("Dick", "cock" a rooster), so
they are masked only written in lower case, which is how Whisper writes the insult;
capitalised, they are taken for a name. Each part of a hyphenated word is judged on
its own ("bull-shit").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TypeVar

STEMS = ("fuck", "shit", "cunt", "bitch", "wank", "twat", "whore", "slut", "piss")
ANYWHERE = ("fuck", "shit")  # no English word holds these but the profane ones
WORDS = frozenset(
    "ass arse arsehole asshole dumbass jackass bastard bollocks dickhead cocksucker "
    "faggot fag kike spic nigger nigga goddamn goddamned goddammit".split()
)
NAMES_TOO = frozenset("dick dicks cock cocks prick pricks pussy pussies".split())

# A word's letters, the punctuation before and after them, and an apostrophe's ending
# ("'s", "'re", "n't" stays with the letters: "don't" is one word).
_PARTS = re.compile(r"^(\W*)([A-Za-z]+(?:n['’]t)?)(['’][a-z]+)?(\W*)$")

W = TypeVar("W")


def is_profane(word: str) -> bool:
    """Whether the letters of ``word`` (no punctuation; any case) are profane."""
    lower = word.lower()
    singular = {lower, lower.removesuffix("s"), lower.removesuffix("es")}
    if singular & WORDS:
        return True
    if lower in NAMES_TOO:
        return word == lower
    return lower.startswith(STEMS) or any(part in lower for part in ANYWHERE)


def masked(word: str) -> str:
    """``word`` as it is written with profanity masked: each profane part (a hyphen
    parts them) with its first letter kept and the rest of its letters as asterisks."""
    if "-" in word.strip("-"):
        return "-".join(masked(part) for part in word.split("-"))
    parts = _PARTS.match(word)
    if parts is None:
        return word
    before, letters, ending, after = parts.groups()
    if not is_profane(letters):
        return word
    return f"{before}{letters[0]}{'*' * (len(letters) - 1)}{ending or ''}{after}"


def mask_words(
    words: Sequence[W], text_of: Callable[[W], str], written: Callable[[W, str], W]
) -> list[W]:
    """``words`` with each profane one written masked (``written(word, text)``: the
    word with that text, its times kept)."""
    out = []
    for word in words:
        text = text_of(word)
        clean = masked(text)
        out.append(word if clean == text else written(word, clean))
    return out


def mask_text(text: str) -> str:
    """A text's words (a partial's, or a final without word times), profanity masked."""
    return " ".join(masked(word) for word in text.split())
