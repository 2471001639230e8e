"""A fixed-size ring of the latest audio samples (no growth, no concatenation)."""

from __future__ import annotations

import numpy as np


class AudioRing:
    """The latest ``capacity`` samples of a stream, in a fixed buffer."""

    def __init__(self, capacity: int):
        self._data = np.zeros(capacity, dtype=np.float32)
        self._written = 0  # samples ever pushed

    @property
    def capacity(self) -> int:
        return len(self._data)

    @property
    def total(self) -> int:
        return self._written

    def push(self, samples: np.ndarray) -> None:
        """Append ``samples``, overwriting the oldest; of more than the ring holds only
        the newest are kept, and ``total`` still counts them all."""
        skipped = max(0, len(samples) - self.capacity)  # older than the ring can hold
        self._written += skipped
        samples = samples[skipped:]
        n = len(samples)
        at = self._written % self.capacity
        first = min(n, self.capacity - at)
        self._data[at : at + first] = samples[:first]
        self._data[: n - first] = samples[first:]
        self._written += n

    def latest(self, count: int) -> np.ndarray:
        """A copy of the last ``count`` samples (fewer at the start of the stream)."""
        count = min(count, self._written, self.capacity)
        end = self._written % self.capacity
        if count <= end:
            return self._data[end - count : end].copy()
        return np.concatenate([self._data[self.capacity - (count - end) :], self._data[:end]])
