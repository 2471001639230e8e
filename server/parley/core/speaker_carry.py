"""Local speakers carried over from the window before, without a new embedding (pure).

A stream's windows are 5 s long and 0.5 s apart, so most of a window's local speaker
is the same speech as one of the window before, and embedding it again hardly moves
its embedding, yet embedding is most of a step's cost (bench/README.md, "Thinned
steps under load"). A local speaker keeps the previous window's
link, unembedded, when its active frames over the two windows' shared stretch match
one linked local speaker's there, and it has been heard alone for less than
``reembed_s`` of new audio since it was last embedded; otherwise it is embedded and
linked as usual. A new voice always gets its own local speaker, so it is embedded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

# Active frames over the shared stretch, intersection over union, for a local speaker to
# be the same speech as one of the window before.
MIN_AGREEMENT = 0.7


@dataclass(frozen=True)
class LinkedWindow:
    """What the next window's carry needs of a linked one."""

    start: float  # stream time of the first frame
    active: np.ndarray  # (frames, local) bool
    speakers: tuple[int | None, ...]  # each local speaker's global speaker (None: unlinked)
    unembedded_s: tuple[float, ...]  # each one's seconds alone since it was last embedded
    embeddings: np.ndarray  # (local, dim) each one's last embedding (NaN rows: none)


def carried(
    previous: LinkedWindow | None,
    start: float,
    active: np.ndarray,
    fresh_alone_s: np.ndarray,
    frame_step: float,
    reembed_s: float,
) -> dict[int, int]:
    """Local speaker → the local speaker of ``previous`` it is carried over from, for
    those of a window starting at ``start`` (``active``: (frames, local) bool) that keep
    its link unembedded."""
    if previous is None or reembed_s <= 0 or not active.size or not previous.active.size:
        return {}
    shift = int(round((start - previous.start) / frame_step))
    shared = min(len(previous.active) - shift, len(active))
    if shift < 0 or shared <= 0:
        return {}
    now = active[:shared].astype(float)
    before = previous.active[shift : shift + shared].astype(float)
    both = now.T @ before  # (local now, local before) frames active in both
    either = now.sum(axis=0)[:, None] + before.sum(axis=0)[None, :] - both
    agreement = np.where(either > 0, both / np.maximum(either, 1), 0.0)
    rows, cols = linear_sum_assignment(-agreement)
    return {
        int(s): int(p)
        for s, p in zip(rows, cols)
        if agreement[s, p] >= MIN_AGREEMENT
        and previous.speakers[p] is not None
        and previous.unembedded_s[p] + float(fresh_alone_s[s]) < reembed_s
    }
