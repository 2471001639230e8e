"""What a caller knows of how many people speak (pure, and light: the wire's stream
config carries it, so every client imports it, while the clustering that reads it
lives in ``speakers`` and ``recording_speakers`` with numpy and scipy)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpeakerCount:
    """What the caller knows of the number of speakers (the reference handler's
    ``num_speakers``, ``min_speakers`` and ``max_speakers``)."""

    exactly: int | None = None
    at_least: int = 1
    at_most: int | None = None

    def __post_init__(self) -> None:
        for value in (self.exactly, self.at_most):
            if value is not None and value < 1:
                raise ValueError("speaker counts must be at least 1")
        if self.at_least < 1:
            raise ValueError("min_speakers must be at least 1")
        if self.at_most is not None and self.at_most < self.at_least:
            raise ValueError("max_speakers must be at least min_speakers")

    def bounds(self, most: int) -> tuple[int, int]:
        """The fewest and most speakers to look for, ``most`` when the caller gave no
        upper bound."""
        if self.exactly is not None:
            return self.exactly, self.exactly
        return self.at_least, max(self.at_least, self.at_most or most)
