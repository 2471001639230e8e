"""Grouping Whisper tokens into words with times (pure; the times come from alignment)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Punctuation that belongs to the word before it, not a word of its own.
_TRAILING = set(".,!?:;%)]}\"'»”’…")


SENTENCE_ENDS = tuple(".!?…。！？")


def ends_sentence(word: str) -> bool:
    """Whether ``word`` ends a sentence ("done." and "done.\"" do, "Mr" does not)."""
    return word.rstrip("\"')»”’").endswith(SENTENCE_ENDS)


def end_punctuation(word: str) -> str:
    """The sentence punctuation a word ends with ("limbic." → "."), which a word written
    in its place (a redaction, a respelled keyterm) keeps."""
    return word[len(word.rstrip(".,!?;:")) :]


@dataclass(frozen=True)
class TimedWord:
    """A word with its times and the model's probability, before any speaker."""

    word: str
    start: float
    end: float
    probability: float


def group_words(
    pieces: Sequence[str],
    starts: Sequence[float],
    ends: Sequence[float],
    probabilities: Sequence[float],
) -> list[TimedWord]:
    """Join token pieces into words: a piece that starts with a space starts a word.

    ``pieces`` are the decoded texts of single tokens (a piece that is only part of a
    multi-byte character must already be merged with its neighbour). A word's
    probability is the mean of its tokens' probabilities.
    """
    if not (len(pieces) == len(starts) == len(ends) == len(probabilities)):
        raise ValueError("pieces, starts, ends and probabilities differ in length")
    groups: list[list[int]] = []
    for index, piece in enumerate(pieces):
        stripped = piece.strip()
        if not stripped:
            continue
        joins_previous = groups and (
            not piece.startswith(" ") or all(ch in _TRAILING for ch in stripped)
        )
        if joins_previous:
            groups[-1].append(index)
        else:
            groups.append([index])
    words = []
    for group in groups:
        text = "".join(pieces[i] for i in group).strip()
        probability = sum(probabilities[i] for i in group) / len(group)
        words.append(TimedWord(text, starts[group[0]], ends[group[-1]], probability))
    return words


def shift_words(words: Sequence[TimedWord], offset: float, limit: float) -> list[TimedWord]:
    """Words moved to stream time and clamped into [offset, limit], never going backwards."""
    out: list[TimedWord] = []
    previous_end = offset
    for w in words:
        start = min(max(w.start + offset, previous_end), limit)
        end = min(max(w.end + offset, start), limit)
        out.append(TimedWord(w.word, start, end, w.probability))
        previous_end = end
    return out


def merge_partial_characters(
    pieces: list[str], starts: list[float], ends: list[float], probs: list[float]
) -> tuple[list[str], list[float], list[float], list[float]]:
    """Merge tokens that hold part of a multi-byte character into the token after them."""
    out_p: list[str] = []
    out_s: list[float] = []
    out_e: list[float] = []
    out_pr: list[float] = []
    carry: tuple[str, float, list[float]] | None = None
    for piece, start, end, prob in zip(pieces, starts, ends, probs):
        if carry is not None:
            piece, start, prob_list = carry[0] + piece, carry[1], carry[2] + [prob]
        else:
            prob_list = [prob]
        if "\ufffd" in piece:
            carry = (piece, start, prob_list)
            continue
        carry = None
        out_p.append(piece)
        out_s.append(start)
        out_e.append(end)
        out_pr.append(float(np.mean(prob_list)))
    return out_p, out_s, out_e, out_pr
