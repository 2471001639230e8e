"""Linking each window's local speakers to the session's global speakers (pure numpy).

As in diart's online clustering: cosine distances between the window's speaker
embeddings and the global centroids, a constrained assignment (two local speakers
never map to one global speaker, Hungarian algorithm), a new global speaker when
nobody is close enough and there is room, and centroid updates from confident
local speakers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment


@dataclass(frozen=True)
class ClusteringConfig:
    max_speakers: int = 8
    new_speaker_distance: float = 0.5  # cosine distance above which a speaker is someone new
    active_threshold: float = 0.5      # peak activity for a local speaker to count at all
    update_threshold: float = 0.6      # peak activity for it to move a centroid

    def __post_init__(self) -> None:
        if not 1 <= self.max_speakers <= 64:
            raise ValueError("max_speakers must be between 1 and 64")
        if not 0.0 < self.new_speaker_distance < 2.0:
            raise ValueError("new_speaker_distance is a cosine distance, between 0 and 2")


def _normalise(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-9)


class OnlineClustering:
    """Global speakers of one stream: their centroids and how many windows built them."""

    def __init__(self, config: ClusteringConfig):
        self.config = config
        self._sums: list[np.ndarray] = []

    @property
    def speaker_count(self) -> int:
        return len(self._sums)

    def centroids(self) -> np.ndarray:
        return _normalise(np.stack(self._sums)) if self._sums else np.zeros((0, 0))

    def assign(self, embeddings: np.ndarray, peak_activity: np.ndarray) -> list[int | None]:
        """Global speaker index for each local speaker (None: inactive or no embedding)."""
        config = self.config
        usable = [i for i in range(len(embeddings))
                  if peak_activity[i] >= config.active_threshold
                  and not np.isnan(embeddings[i]).any()]
        result: list[int | None] = [None] * len(embeddings)
        if not usable:
            return result
        local = _normalise(embeddings[usable])
        if self._sums:
            distances = 1.0 - local @ self.centroids().T
            rows, cols = linear_sum_assignment(distances)
            matched = {r: c for r, c in zip(rows, cols)
                       if distances[r, c] <= config.new_speaker_distance}
        else:
            distances, matched = None, {}
        for row, index in enumerate(usable):
            if row in matched:
                result[index] = int(matched[row])
            elif len(self._sums) < config.max_speakers:
                self._sums.append(local[row].copy())
                result[index] = len(self._sums) - 1
            elif distances is not None:
                # No room for anyone new: the closest speaker not already taken here.
                taken = {g for g in result if g is not None}
                free = [c for c in np.argsort(distances[row]) if int(c) not in taken]
                result[index] = int(free[0]) if free else None
        for row, index in enumerate(usable):
            speaker = result[index]
            if speaker is not None and peak_activity[index] >= config.update_threshold:
                self._sums[speaker] = self._sums[speaker] + local[row]
        return result
