"""Spectral clustering's graph work (pure): a similarity graph pruned to each row's
nearest, its Laplacian, the smallest eigenpairs of that (sparse past a few hundred rows,
so that a two-hour stream's windows fit), and k-means on their eigenvectors.
``recording_speakers`` clusters a recording's voices with them, as 3D-Speaker (CAM++'s
authors) cluster its embeddings."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # scipy loads with the clustering, not with the module
    from scipy import sparse


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Each row scaled to unit length (a zero row stays zero)."""
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-9)


# Rows of similarities computed at once while pruning: the whole n × n matrix of a
# two-hour stream's windows would take gigabytes, and each block's similarities, their
# negation and argpartition's indices are the clustering's largest arrays. With 1024
# rows, 5,400 embeddings (half an hour of windows, three voices in each) peaked at 199 MB,
# and a stream's relabels left the server's heap that large; with 128, 59 MB, no slower
# (bench/VARIANTS.md, "The relabel's similarities a few rows at a time").
BLOCK_ROWS = 128


def pruned_laplacian(unit: np.ndarray, keep: int) -> sparse.csr_matrix:
    """The Laplacian of the graph linking each row to its ``keep`` most alike (itself
    included, negative similarities as none), symmetrised, as a sparse matrix."""
    from scipy import sparse

    n = len(unit)
    rows, cols, values = [], [], []
    for first in range(0, n, BLOCK_ROWS):
        similarity = unit[first : first + BLOCK_ROWS] @ unit.T
        nearest = np.argpartition(-similarity, keep - 1, axis=1)[:, :keep]
        rows.append(np.repeat(np.arange(first, first + len(similarity)), keep))
        cols.append(nearest.ravel())
        values.append(np.maximum(np.take_along_axis(similarity, nearest, axis=1), 0.0).ravel())
    affinity = sparse.coo_matrix(
        (np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n)
    ).tocsr()
    affinity = (affinity + affinity.T) / 2
    affinity.setdiag(0.0)
    affinity.eliminate_zeros()
    degrees = np.asarray(affinity.sum(axis=1)).ravel()
    return sparse.diags(degrees) - affinity


# Below this many rows the dense solver is quicker than the sparse one's factorisation.
DENSE_UP_TO = 600


def smallest_eigenpairs(laplacian: sparse.csr_matrix, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` smallest eigenvalues of a sparse symmetric Laplacian, ascending, and
    their eigenvectors (columns). Past ``DENSE_UP_TO`` rows, shift-invert just below
    zero (the Laplacian itself is singular) finds them without a dense matrix."""
    from scipy.linalg import eigh
    from scipy.sparse.linalg import ArpackError, eigsh

    n = laplacian.shape[0]
    if n > DENSE_UP_TO and count < n - 1:
        try:
            values, vectors = eigsh(laplacian.tocsc(), k=count, sigma=-1e-3, which="LM")
            order = np.argsort(values)
            return values[order], vectors[:, order]
        except ArpackError:  # not converged: the dense solver below, slower but sure
            pass
    return eigh(laplacian.toarray(), subset_by_index=[0, count - 1])


def kmeans(points: np.ndarray, k: int, tries: int = 10) -> np.ndarray:
    """k-means (k-means++ starts, the best of ``tries`` seeded runs: the same labels on
    every run)."""
    from scipy.cluster.vq import kmeans2

    best, best_cost = np.zeros(len(points), dtype=int), np.inf
    for seed in range(tries):
        centres, labels = kmeans2(points, k, minit="++", seed=seed)
        cost = float(((points - centres[labels]) ** 2).sum())
        if cost < best_cost:
            best, best_cost = labels, cost
    return best
