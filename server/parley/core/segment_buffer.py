"""The audio of the segment being spoken, for the VAD (core/vad.py)."""

from __future__ import annotations

import numpy as np


class SegmentBuffer:
    """Audio of the segment being spoken, preallocated to its maximum length, and whether
    the VAD heard each of its frames as voiced."""

    def __init__(self, capacity: int, frame: int):
        self._data = np.zeros(capacity, dtype=np.float32)
        self._voiced = np.zeros(capacity // frame + 1, dtype=bool)
        self._frame = frame
        self.start_sample = 0
        self.length = 0
        self.last_voiced_end = 0  # in samples from start_sample

    def reset(self, start_sample: int) -> None:
        """Empty, for a segment starting at ``start_sample`` of the stream."""
        self.start_sample = start_sample
        self.length = 0
        self.last_voiced_end = 0

    def append(self, audio: np.ndarray, voiced: np.ndarray | bool) -> None:
        """Whole frames (and at most one short one, last); ``voiced``: one flag per frame."""
        first = self.length // self._frame
        frames = -(-len(audio) // self._frame)
        self._voiced[first : first + frames] = voiced
        self._data[self.length : self.length + len(audio)] = audio
        self.length += len(audio)

    def view(self, end: int | None = None) -> np.ndarray:
        """The audio so far (up to ``end`` samples), not copied."""
        return self._data[: self.length if end is None else end]

    def voiced(self, start: int = 0, end: int | None = None) -> np.ndarray:
        """Flags of the frames in samples [start, end) (both on frame boundaries)."""
        end = self.length if end is None else end
        return self._voiced[start // self._frame : -(-end // self._frame)].copy()
