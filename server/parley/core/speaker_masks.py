"""Which audio each local speaker's embedding is computed from (pure numpy).

Segmentation gives each local speaker's activity per frame. A speaker's embedding
is best taken where they speak alone (overlap blurs it); when they are alone for
less than ``min_alone_s`` in the window, all their active frames are used instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parley.core.audio import SAMPLE_RATE


@dataclass(frozen=True)
class FrameGrid:
    """Where a segmentation model's output frames fall in its input window."""

    step: float  # seconds between frames
    start: float  # the first frame's start within the window

    def frame_of_samples(self, samples: int, frames: int) -> np.ndarray:
        """The frame index that covers each of ``samples`` window samples."""
        times = np.arange(samples) / SAMPLE_RATE
        return np.clip(((times - self.start) // self.step).astype(int), 0, frames - 1)


@dataclass(frozen=True)
class SpeakerFrames:
    """Each local speaker's frames in one window: active, and active alone."""

    active: np.ndarray  # (frames, local) bool
    alone: np.ndarray  # (frames, local) bool: active while no other local speaker is

    @classmethod
    def of(cls, activity: np.ndarray, active_probability: float) -> SpeakerFrames:
        active = activity > active_probability
        return cls(active, active & (active.sum(axis=1, keepdims=True) == 1))

    def alone_seconds(self, grid: FrameGrid, from_frame: int = 0) -> np.ndarray:
        """(local,) seconds each speaker is heard alone, in frames from ``from_frame`` on."""
        return self.alone[from_frame:].sum(axis=0) * grid.step

    def embedding_masks(self, grid: FrameGrid, samples: int, min_alone_s: float) -> np.ndarray:
        """(local, samples) bool: the window samples to embed each local speaker from."""
        use_alone = self.alone_seconds(grid) >= min_alone_s
        frame_masks = np.where(use_alone[None, :], self.alone, self.active)
        return frame_masks[grid.frame_of_samples(samples, len(frame_masks))].T
