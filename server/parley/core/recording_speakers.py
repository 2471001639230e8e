"""Speakers of a whole recording: cluster every window's voices at once (pure).

A stream must label a voice when it is first heard, with only the past to compare
with (``speakers.OnlineClustering``). A recording is known in full, so its windows'
local speakers are clustered together, by spectral clustering as 3D-Speaker (CAM++'s
authors) cluster its embeddings: a graph linking each embedding to its few most alike
(the rest of its similarities pruned to nothing), the graph's Laplacian, the number of
speakers where its smallest eigenvalues jump the most (the eigengap), brought within
the caller's ``min_speakers`` .. ``max_speakers`` or replaced by its ``num_speakers``,
and k-means on those eigenvectors (the graph work: ``spectral_graph``). Two clusters as
alike as one voice's own windows (relative to their spreads, as the live linking's split
tells two voices apart) are one: the eigengap alone split single voices whose windows
drift (a pause, a noise). Two that took turns in time but were never two local speakers
of one window need a little less likeness: one voice split so looks like that.
Clusters with too little speech alone are folded into the nearest larger one; then
every embedding goes to its nearest centroid, and the windows' activities, mapped to
those speakers, are aggregated.

Why not a distance cut (average linkage, as before): a cut at one cosine distance
counted well only for voices as far apart as the ones it was tuned on, and given the
true count its clusters were worse still (bench/VARIANTS.md, "Recordings: speakers of a
whole file"); the graph keeps only each window's nearest, so a voice whose own windows
spread widely is still one connected speaker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from parley.core.speaker_count import SpeakerCount
from parley.core.speaker_timeline import TimelineSnapshot, Turn
from parley.core.speakers import ClusteringConfig, relative_similarity
from parley.core.spectral_graph import kmeans, pruned_laplacian, smallest_eigenpairs, unit_rows
from parley.core.stream_diarizer import WindowSpeakers

# RecordingClustering's neighbours and min_speaker_s are for windows this far apart
# (``for_step`` scales them to another step): first tuned with a recording's windows
# 2.5 s apart.
NEIGHBOURS_STEP_S = 2.5


@dataclass(frozen=True)
class RecordingClustering:
    """How a whole recording's window embeddings are clustered into speakers."""

    # 3D-Speaker's own settings for CAM++ (its SpectralCluster: pval 0.02, min_pnum 6);
    # on bench/devset.py's dev split 5 to 7 neighbours count alike, 4 and 8 worse.
    # min_speaker_s was tuned there too: 4 to 8 s count alike, 2 and 10 worse.
    neighbours: int = 6  # each embedding keeps its similarity to this many (itself included)
    neighbour_share: float = 0.02  # or to this share of all embeddings, if more
    max_speakers: int = 8  # the eigengap is searched up to this many (or the caller's most)
    # Tuned on dev (0.93 to 0.97 tried): two clusters more alike than this, relative to
    # their own spreads, are one voice; the spread's prior is the live linking's.
    same_voice: float = 0.95
    # Two clusters heard in windows next to each other but never as two local speakers of
    # one window are one voice from this relative similarity: a change of voice inside a
    # window mostly gets a local speaker of its own there, and one voice drifting (a
    # pause, a noise) never does, so the eigengap's halves of one voice look so. Chosen on
    # dev (0.92 and 0.93 alike; at 0.90 two pairs of espeak-ng voices, 0.902 and 0.905
    # alike, joined too: the segmentation cannot tell them apart in a window either).
    apart_voice: float = 0.92
    voice_similarity: float = ClusteringConfig.voice_similarity
    # seconds alone, summed over the windows (5 s long, 2.5 s apart: about twice the
    # speech), for a cluster to stay a speaker of its own
    min_speaker_s: float = 6.0
    min_alone_s: float = 0.5  # seconds alone in a window for its embedding to count
    active_threshold: float = 0.5

    def for_step(self, step_s: float) -> RecordingClustering:
        """These settings for windows ``step_s`` apart, where ``neighbours`` and
        ``min_speaker_s`` are for windows NEIGHBOURS_STEP_S apart: each embedding keeps as
        many seconds of neighbours (with windows closer together, the same count would
        link mostly its own overlapping windows), and a speaker needs as many seconds of
        speech alone (closer windows count each second more often)."""
        scale = NEIGHBOURS_STEP_S / step_s
        return replace(
            self,
            neighbours=max(2, round(self.neighbours * scale)),
            min_speaker_s=self.min_speaker_s * scale,
        )

    def __post_init__(self) -> None:
        if self.neighbours < 2:
            raise ValueError("each embedding needs at least one neighbour besides itself")
        if not 0.0 <= self.neighbour_share <= 1.0:
            raise ValueError("neighbour_share is a share, between 0 and 1")
        if self.max_speakers < 1:
            raise ValueError("max_speakers must be at least 1")


def cluster(
    embeddings: np.ndarray,
    weights: np.ndarray,
    config: RecordingClustering,
    count: SpeakerCount = SpeakerCount(),
    windows: np.ndarray | None = None,
) -> np.ndarray:
    """(n, dim) embeddings, each worth ``weights[i]`` seconds alone → a speaker index per
    embedding, 0..k-1, numbered by first appearance. ``windows[i]``: the index of the
    window embedding ``i`` came from, in time order (None: unknown, every pair of clusters
    held to ``same_voice``)."""
    n = len(embeddings)
    fewest, most = count.bounds(config.max_speakers)
    if n <= 2:  # too few for a graph: each its own speaker only if the caller says so
        return np.arange(n) if fewest >= n else np.zeros(n, dtype=int)
    unit = unit_rows(embeddings.astype(np.float64))
    labels = _spectral(unit, config, min(fewest, n), min(most, n))
    labels = _join_alike(unit, labels, config, fewest, windows)
    labels = _fold_small(unit, weights, labels, config.min_speaker_s, keep=fewest)
    centroids = _centroids(unit, weights, labels)
    labels = np.argmax(unit @ centroids.T, axis=1)  # each to its nearest speaker
    return _by_appearance(labels)


def _spectral(unit: np.ndarray, config: RecordingClustering, fewest: int, most: int) -> np.ndarray:
    """Spectral clustering of unit rows: the count where the pruned graph's Laplacian
    eigenvalues jump the most (1..``config.max_speakers``), brought into
    ``fewest``..``most``."""
    n = len(unit)
    keep = min(n, max(config.neighbours, int(np.ceil(config.neighbour_share * n))))
    laplacian = pruned_laplacian(unit, keep)
    last = min(n - 1, max(config.max_speakers, most))  # the gap after λ[k-1] needs λ[k]
    values, vectors = smallest_eigenpairs(laplacian, last + 1)
    found = 1 + int(np.argmax(np.diff(values)))  # the largest gap, λ[k] - λ[k-1]
    k = int(np.clip(found, fewest, most))
    if k <= 1:
        return np.zeros(n, dtype=int)
    return kmeans(vectors[:, :k], k)


def _join_alike(
    unit: np.ndarray,
    labels: np.ndarray,
    config: RecordingClustering,
    keep: int,
    windows: np.ndarray | None,
) -> np.ndarray:
    """The two clusters furthest past their bar joined, while a pair reaches it and more
    than ``keep`` clusters remain. The bar is ``same_voice``, or ``apart_voice`` for two
    clusters heard in windows next to each other and never in one."""
    labels = _by_appearance(labels)
    while labels.max() + 1 > max(keep, 1):
        groups = [unit[labels == k] for k in range(labels.max() + 1)]
        heard = [
            set(windows[labels == k].tolist()) if windows is not None else set()
            for k in range(len(groups))
        ]
        pairs = [
            (
                relative_similarity(groups[a], groups[b], config.voice_similarity)
                - _bar(heard[a], heard[b], config),
                a,
                b,
            )
            for a in range(len(groups))
            for b in range(a + 1, len(groups))
            if min(len(groups[a]), len(groups[b])) >= 2
        ]
        if not pairs:
            break
        past, a, b = max(pairs)
        if past < 0:
            break
        labels = _by_appearance(np.where(labels == b, a, labels))
    return labels


def _bar(heard_a: set[int], heard_b: set[int], config: RecordingClustering) -> float:
    """How alike two clusters heard in these windows must be to join (``_join_alike``)."""
    apart = not heard_a & heard_b and any(w + 1 in heard_b or w - 1 in heard_b for w in heard_a)
    return config.apart_voice if apart else config.same_voice


def _centroids(unit: np.ndarray, weights: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return unit_rows(
        np.stack(
            [
                (unit[labels == k] * weights[labels == k, None]).sum(axis=0)
                for k in range(labels.max() + 1)
            ]
        )
    )


def _fold_small(
    unit: np.ndarray, weights: np.ndarray, labels: np.ndarray, min_speaker_s: float, keep: int
) -> np.ndarray:
    """Clusters with under ``min_speaker_s`` alone join their nearest larger cluster,
    while more than ``keep`` clusters remain (a count the caller gave is kept)."""
    labels = _by_appearance(labels)
    while labels.max() + 1 > max(keep, 1):
        seconds = np.bincount(labels, weights=weights)
        smallest = int(np.argmin(seconds))
        if seconds[smallest] >= min_speaker_s:
            break
        centroids = _centroids(unit, weights, labels)
        alike = centroids @ centroids[smallest]
        alike[smallest] = -np.inf
        labels = np.where(labels == smallest, int(np.argmax(alike)), labels)
        labels = _by_appearance(labels)
    return labels


def _by_appearance(labels: np.ndarray) -> np.ndarray:
    order = {label: i for i, label in enumerate(dict.fromkeys(labels.tolist()))}
    return np.array([order[label] for label in labels.tolist()], dtype=int)


# Where each embedded local speaker went: (window index, local speaker) → speaker.
WindowSpeakerMap = dict[tuple[int, int], int]


def cluster_windows(
    windows: Sequence[WindowSpeakers],
    config: RecordingClustering,
    count: SpeakerCount = SpeakerCount(),
) -> WindowSpeakerMap:
    """The recording's speaker of every local speaker of ``windows`` heard alone long
    enough to count (``min_alone_s``), clustered at once; the others are left out."""
    where: list[tuple[int, int]] = []
    vectors, weights = [], []
    for w, window in enumerate(windows):
        local = window.local
        for s in range(len(local.alone_s)):
            if (
                local.alone_s[s] >= config.min_alone_s
                and local.peak_activity[s] >= config.active_threshold
                and not np.isnan(local.embeddings[s]).any()
            ):
                where.append((w, s))
                vectors.append(local.embeddings[s])
                weights.append(float(local.alone_s[s]))
    if not vectors:  # silence, noise, or too short a clip: nobody to cluster
        return {}
    windows_of = np.array([w for w, _ in where])
    labels = cluster(np.array(vectors), np.array(weights), config, count, windows_of)
    return {place: int(label) for place, label in zip(where, labels)}


def diarize_windows(
    windows: Sequence[WindowSpeakers],
    frame_step: float,
    config: RecordingClustering,
    count: SpeakerCount = SpeakerCount(),
) -> TimelineSnapshot:
    """Every window of a recording (as ``StreamDiarizer.observe`` gives them) → who spoke
    when, every turn settled (``cluster_windows``, then ``timeline_of``)."""
    speaker_of = cluster_windows(windows, config, count)
    return timeline_of(windows, frame_step, speaker_of, config.active_threshold)


def timeline_of(
    windows: Sequence[WindowSpeakers],
    frame_step: float,
    speaker_of: WindowSpeakerMap,
    active_threshold: float,
) -> TimelineSnapshot:
    """Who spoke when, from the windows' activities and their local speakers' speakers.

    As pyannote reconstructs: each frame's number of speakers is the windows' mean count
    of active local speakers (those without an embedding included), and that many of the
    recording's speakers, the most active there, speak in it. A plain mean of activity
    would lose a voice wherever a window had too little of it alone to embed."""
    speakers = max(speaker_of.values(), default=-1) + 1
    if not windows:
        return TimelineSnapshot((), 0.0, 0)
    firsts = [int(round(window.start / frame_step)) for window in windows]
    frames = max(first + len(window.activity) for first, window in zip(firsts, windows))
    scores = np.zeros((frames, speakers))
    counts = np.zeros(frames)
    seen = np.zeros(frames)
    for w, (first, window) in enumerate(zip(firsts, windows)):
        rows = slice(first, first + len(window.activity))
        active = window.activity > active_threshold
        counts[rows] += active.sum(axis=1)
        seen[rows] += 1
        for s in range(window.activity.shape[1]):
            k = speaker_of.get((w, s))
            if k is not None:
                scores[rows, k] += window.activity[:, s]
    speaking = np.zeros((frames, speakers), dtype=bool)
    wanted = np.rint(counts / np.maximum(seen, 1)).astype(int)
    order = np.argsort(-scores, axis=1)
    for f in np.flatnonzero(wanted):
        top = order[f, : wanted[f]]
        speaking[f, top[scores[f, top] > 0]] = True
    return _snapshot(speaking, frame_step)


def _snapshot(speaking: np.ndarray, frame_step: float) -> TimelineSnapshot:
    turns = []
    for k in range(speaking.shape[1]):
        edges = np.diff(np.concatenate([[0], speaking[:, k].astype(int), [0]]))
        for a, b in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)):
            turns.append(Turn(a * frame_step, b * frame_step, k))
    turns.sort(key=lambda turn: (turn.start, turn.speaker))
    end = len(speaking) * frame_step
    return TimelineSnapshot(tuple(turns), end, len({t.speaker for t in turns}), (), end)
