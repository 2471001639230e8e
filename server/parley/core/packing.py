"""Packing a recording's speech segments into full decoder windows, and back.

A stream decodes each VAD segment on its own, and pays a whole 30 s encoder pass for
it. A recording is known in full, so its segments are packed in order, long silences
left out, into windows of at most ``max_s`` (faster-whisper's batched pipeline does the
same): a 6-minute talk of 81 turns becomes about 13 windows, not 81. Between two pieces
the window keeps the recording's own pause, up to ``gap_s``: laid end to end, a
sentence's last word was placed at the start of the next piece (bench/VARIANTS.md,
"Silence between a window's pieces", measured while every word came a word late), and
base reads better with the pause. The words a window's decode gives
are then placed back at their segments' times: each word goes to the piece its middle
falls in (a word in the silence after a piece, to that piece), and keeps its offset
inside that piece.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from parley.core.audio import SAMPLE_RATE
from parley.core.words import TimedWord

# Fewer words than this a second of a packed piece's speech: the decoder skipped it
# (people say 2 to 3 words a second), where it holds at least MIN_SKIPPED_S of speech.
# A shorter piece without words is mostly a word the decoder heard and placed in the
# piece beside it: decoded again, it would be written twice.
MIN_WORDS_PER_S = 0.5
MIN_SKIPPED_S = 1.0


@dataclass(frozen=True)
class Piece:
    """One speech segment of the recording: where it is in the recording, and its
    voiced regions (seconds from its own start)."""

    segment_id: int
    start: float
    end: float
    voiced: tuple[tuple[float, float], ...] = ()

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def speech_seconds(self) -> float:
        """Seconds of its voiced regions (all of it, where none are known)."""
        return sum(b - a for a, b in self.voiced) if self.voiced else self.seconds


@dataclass(frozen=True)
class Window:
    """Pieces laid end to end: piece ``i`` starts ``offsets[i]`` seconds into the window."""

    pieces: tuple[Piece, ...]
    offsets: tuple[float, ...]

    @property
    def seconds(self) -> float:
        return self.offsets[-1] + self.pieces[-1].seconds if self.pieces else 0.0

    def audio(self, recording: np.ndarray) -> np.ndarray:
        """The window's samples, cut from the 16 kHz recording: each piece with the
        pause between it and the next as the recording has it, a longer pause shortened
        to the window's gap (its first and last halves)."""
        parts = []
        for i, (piece, offset) in enumerate(zip(self.pieces, self.offsets)):
            if i:
                before = self.pieces[i - 1]
                half = (offset - self.offsets[i - 1] - before.seconds) / 2
                parts += [_cut(recording, before.end, before.end + half)]
                parts += [_cut(recording, piece.start - half, piece.start)]
            parts.append(_cut(recording, piece.start, piece.end))
        return np.concatenate(parts)

    def voiced_regions(self) -> list[tuple[float, float]]:
        """Every piece's voiced regions, in window time."""
        return [
            (offset + a, offset + b)
            for piece, offset in zip(self.pieces, self.offsets)
            for a, b in piece.voiced
        ]

    def place(self, words: Sequence[TimedWord]) -> list[list[TimedWord]]:
        """``words`` (window time) → for each piece, its words in recording time, clamped
        into the piece."""
        placed: list[list[TimedWord]] = [[] for _ in self.pieces]
        for word in words:
            index = self._piece_of(word)
            piece, offset = self.pieces[index], self.offsets[index]
            start = min(max(piece.start + word.start - offset, piece.start), piece.end)
            end = min(max(piece.start + word.end - offset, start), piece.end)
            placed[index].append(TimedWord(word.word, start, end, word.probability))
        return placed

    def _piece_of(self, word: TimedWord) -> int:
        middle = (word.start + word.end) / 2
        return max(0, int(np.searchsorted(self.offsets, middle, side="right")) - 1)

    def unheard(self, words: Sequence[TimedWord]) -> tuple[Piece, ...]:
        """The pieces that ``words`` (window time) barely reached: fewer words than
        ``MIN_WORDS_PER_S`` for each second of the piece's speech (``MIN_SKIPPED_S`` of
        it at least). None when the words reach no piece (a window with no words is
        silence, not a decoder that skipped) or the window is one piece (it was decoded
        alone).

        Whisper sometimes ends a dense 30 s window early, or jumps from its first words
        to its last sentence: the pieces it skipped are decoded again, each alone."""
        if len(self.pieces) == 1 or not words:
            return ()
        counts = [len(piece_words) for piece_words in self.place(words)]
        return tuple(
            piece
            for piece, count in zip(self.pieces, counts)
            if piece.speech_seconds >= MIN_SKIPPED_S
            and count < MIN_WORDS_PER_S * piece.speech_seconds
        )

    def words_outside(
        self, words: Sequence[TimedWord], pieces: Sequence[Piece]
    ) -> tuple[TimedWord, ...]:
        """``words`` (window time) but those that fall in ``pieces``."""
        left_out = set(pieces)
        return tuple(w for w in words if self.pieces[self._piece_of(w)] not in left_out)


def _cut(recording: np.ndarray, start: float, end: float) -> np.ndarray:
    return recording[round(start * SAMPLE_RATE) : round(end * SAMPLE_RATE)]


def pack(pieces: Sequence[Piece], max_s: float, gap_s: float = 0.0) -> list[Window]:
    """Consecutive pieces, in order, into windows of at most ``max_s`` seconds, with the
    pause between two pieces kept up to ``gap_s`` (a piece longer than ``max_s`` gets a
    window of its own; the VAD keeps segments shorter)."""
    windows: list[Window] = []
    current: list[Piece] = []
    offsets: list[float] = []
    filled = 0.0
    for piece in pieces:
        gap = min(gap_s, max(piece.start - current[-1].end, 0.0)) if current else 0.0
        if current and filled + gap + piece.seconds > max_s:
            windows.append(Window(tuple(current), tuple(offsets)))
            current, offsets, filled, gap = [], [], 0.0, 0.0
        filled += gap
        current.append(piece)
        offsets.append(filled)
        filled += piece.seconds
    if current:
        windows.append(Window(tuple(current), tuple(offsets)))
    return windows
