"""Packing a recording's speech segments into full decoder windows, and back.

A stream decodes each VAD segment on its own, and pays a whole 30 s encoder pass for
it. A recording is known in full, so its segments are packed in order, silence left
out, into windows of at most ``max_s`` (faster-whisper's batched pipeline does the
same): a 6-minute talk of 81 turns becomes about 13 windows, not 81. The words a
window's decode gives are then placed back at their segments' times: each word goes to
the piece its middle falls in, and keeps its offset inside that piece.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from parley.core.audio import SAMPLE_RATE
from parley.core.words import TimedWord


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


@dataclass(frozen=True)
class Window:
    """Pieces laid end to end: piece ``i`` starts ``offsets[i]`` seconds into the window."""

    pieces: tuple[Piece, ...]
    offsets: tuple[float, ...]

    @property
    def seconds(self) -> float:
        return self.offsets[-1] + self.pieces[-1].seconds if self.pieces else 0.0

    def audio(self, recording: np.ndarray) -> np.ndarray:
        """The window's samples, cut from the 16 kHz recording."""
        return np.concatenate(
            [
                recording[round(p.start * SAMPLE_RATE) : round(p.end * SAMPLE_RATE)]
                for p in self.pieces
            ]
        )

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
            middle = (word.start + word.end) / 2
            index = max(0, int(np.searchsorted(self.offsets, middle, side="right")) - 1)
            piece, offset = self.pieces[index], self.offsets[index]
            start = min(max(piece.start + word.start - offset, piece.start), piece.end)
            end = min(max(piece.start + word.end - offset, start), piece.end)
            placed[index].append(TimedWord(word.word, start, end, word.probability))
        return placed

    def unheard_tail(self, words: Sequence[TimedWord]) -> Window | None:
        """The pieces after the last that ``words`` (window time) reached, as a window of
        their own; None when the words reach the last piece (or reach none: a window
        with no words is silence, not a decoder that stopped early).

        Whisper sometimes ends a full window early, after the first sentences of a
        dense 30 s: the pieces it never reached are decoded again on their own."""
        placed = self.place(words)
        reached = [i for i, piece_words in enumerate(placed) if piece_words]
        if not reached or reached[-1] == len(self.pieces) - 1:
            return None
        return pack(self.pieces[reached[-1] + 1 :], float("inf"))[0]


def pack(pieces: Sequence[Piece], max_s: float) -> list[Window]:
    """Consecutive pieces, in order, into windows of at most ``max_s`` seconds (a piece
    longer than ``max_s`` gets a window of its own; the VAD keeps segments shorter)."""
    windows: list[Window] = []
    current: list[Piece] = []
    offsets: list[float] = []
    filled = 0.0
    for piece in pieces:
        if current and filled + piece.seconds > max_s:
            windows.append(Window(tuple(current), tuple(offsets)))
            current, offsets, filled = [], [], 0.0
        current.append(piece)
        offsets.append(filled)
        filled += piece.seconds
    if current:
        windows.append(Window(tuple(current), tuple(offsets)))
    return windows
