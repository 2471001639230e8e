"""Dynamic time warping of Whisper's token-by-frame alignment cost, by anti-diagonals.

The same path as openai/whisper's ``dtw_cpu`` and transformers' ``_dynamic_time_warping``
(the same float32 costs and the same tie-breaking: diagonal, then up, then left), but
each anti-diagonal is one vector step: every cell on it depends only on the two
diagonals before. transformers' double loop in Python took 0.28 s for one 29 s window
of 100 tokens (1450 frames) here, a fifth of a recording's decode time.

The tables are kept by anti-diagonal (cell ``(i, j)`` at ``[i + j, i]``), so that a
cell's three predecessors are plain slices of the two diagonals before it: indexing
the square tables by diagonal took three times as long (16 ms for a 14 s final of 63
tokens, against 5 ms), a third of finishing a final.
"""

from __future__ import annotations

import numpy as np


def dynamic_time_warping(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(text indices, time indices) of the cheapest monotonic path through ``matrix``
    (tokens × frames), from the first cell to the last."""
    rows, cols = matrix.shape
    diagonals = rows + cols + 1
    # The cost table has a row and a column of infinity before the matrix, except its
    # corner, from which every path starts.
    cost = np.full((diagonals, rows + 1), np.inf, dtype=np.float32)
    cost[0, 0] = 0
    went_diagonally = np.zeros((diagonals, rows + 1), dtype=bool)
    went_up = np.zeros((diagonals, rows + 1), dtype=bool)
    values = np.empty((diagonals, rows + 1))  # summed in float64, kept in float32: as theirs
    token, frame = np.arange(1, rows + 1)[:, None], np.arange(1, cols + 1)
    values[token + frame, token] = matrix
    for diagonal in range(2, diagonals):
        low, high = max(1, diagonal - cols), min(rows, diagonal - 1)
        before = cost[diagonal - 2, low - 1 : high]  # (i - 1, j - 1)
        above = cost[diagonal - 1, low - 1 : high]  # (i - 1, j)
        left = cost[diagonal - 1, low : high + 1]  # (i, j - 1)
        diagonally = before < np.minimum(above, left)
        up = (above < before) & (above < left)
        chosen = np.where(diagonally, before, np.where(up, above, left))
        cost[diagonal, low : high + 1] = values[diagonal, low : high + 1] + chosen
        went_diagonally[diagonal, low : high + 1] = diagonally
        went_up[diagonal, low : high + 1] = up
    i, j = rows, cols
    text, time = [], []
    while i > 0 or j > 0:
        text.append(i - 1)
        time.append(j - 1)
        if i > 0 and j > 0 and went_diagonally[i + j, i]:
            i, j = i - 1, j - 1
        elif j == 0 or (i > 0 and went_up[i + j, i]):
            i -= 1  # the first column's cells are reached from above
        else:
            j -= 1  # and the first row's from the left
    return np.array(text[::-1]), np.array(time[::-1])
