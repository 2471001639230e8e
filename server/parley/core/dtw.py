"""Dynamic time warping of Whisper's token-by-frame alignment cost, by anti-diagonals.

The same path as openai/whisper's ``dtw_cpu`` and transformers' ``_dynamic_time_warping``
(the same float32 costs and the same tie-breaking: diagonal, then up, then left), but
each anti-diagonal is one vector step: every cell on it depends only on the two
diagonals before. transformers' double loop in Python took 0.28 s for one 29 s window
of 100 tokens (1450 frames) here, a fifth of a recording's decode time.
"""

from __future__ import annotations

import numpy as np


def dynamic_time_warping(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(text indices, time indices) of the cheapest monotonic path through ``matrix``
    (tokens × frames), from the first cell to the last."""
    rows, cols = matrix.shape
    cost = np.full((rows + 1, cols + 1), np.inf, dtype=np.float32)
    trace = np.full((rows + 1, cols + 1), -1, dtype=np.int8)
    cost[0, 0] = 0
    values = np.asarray(matrix, dtype=np.float64)  # summed in float64, kept in float32: as theirs
    for diagonal in range(2, rows + cols + 1):
        i = np.arange(max(1, diagonal - cols), min(rows, diagonal - 1) + 1)
        j = diagonal - i
        c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
        step = np.where((c0 < c1) & (c0 < c2), 0, np.where((c1 < c0) & (c1 < c2), 1, 2))
        cost[i, j] = values[i - 1, j - 1] + np.choose(step, (c0, c1, c2))
        trace[i, j] = step
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = rows, cols
    text, time = [], []
    while i > 0 or j > 0:
        text.append(i - 1)
        time.append(j - 1)
        move = trace[i, j]
        if move == 0:
            i, j = i - 1, j - 1
        elif move == 1:
            i -= 1
        else:
            j -= 1
    return np.array(text[::-1]), np.array(time[::-1])
