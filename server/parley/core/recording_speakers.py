"""Speakers of a whole recording: cluster every window's voices at once (pure).

A stream must label a voice when it is first heard, with only the past to compare
with (``speakers.OnlineClustering``). A recording is known in full, so its windows'
local speakers are clustered together, as pyannote's offline pipeline does:
agglomerative clustering (average linkage, cosine) of every embedding, cut at a
distance, or at the count the caller gives (``num_speakers``, or clamped into
``min_speakers``..``max_speakers``); clusters with too little speech alone are
folded into the nearest larger one; then every embedding goes to its nearest
centroid, and the windows' activities, mapped to those speakers, are aggregated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from parley.core.audio import SAMPLE_RATE
from parley.core.speaker_timeline import TimelineSnapshot, Turn
from parley.core.stream_diarizer import (
    DiarizationConfig,
    SpeakerModel,
    StreamDiarizer,
    WindowSpeakers,
)


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

    def clamp(self, found: int, available: int) -> int:
        """The cluster count to cut at, given ``found`` by the distance and at most
        ``available`` embeddings."""
        if self.exactly is not None:
            wanted = self.exactly
        else:
            wanted = max(found, self.at_least)
            if self.at_most is not None:
                wanted = min(wanted, self.at_most)
        return max(1, min(wanted, available))


@dataclass(frozen=True)
class RecordingClustering:
    # Tuned on bench/devset.py's dev split (bench/speakers.py --recording): average-
    # linkage cosine distance between two speakers, and the seconds alone (summed over
    # windows that overlap by half, so about twice the speech) a speaker needs, else it
    # joins the nearest.
    """How a whole recording's window embeddings are clustered into speakers."""

    distance: float = 0.25
    min_speaker_s: float = 10.0
    min_alone_s: float = 0.5  # seconds alone in a window for its embedding to count
    active_threshold: float = 0.5
    min_silhouette: float = 0.0  # above 0: count speakers by silhouette, not by distance

    def __post_init__(self) -> None:
        if not 0.0 < self.distance < 2.0:
            raise ValueError("the clustering distance is a cosine distance, between 0 and 2")


def _unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-9)


def cluster(
    embeddings: np.ndarray,
    weights: np.ndarray,
    config: RecordingClustering,
    count: SpeakerCount = SpeakerCount(),
) -> np.ndarray:
    """(n, dim) embeddings, each worth ``weights[i]`` seconds alone → a speaker index per
    embedding, 0..k-1, numbered by first appearance."""
    from scipy.cluster.hierarchy import fcluster, linkage

    n = len(embeddings)
    if n == 0:
        return np.zeros(0, dtype=int)
    if n == 1:
        return np.zeros(1, dtype=int)
    unit = _unit(embeddings.astype(np.float64))
    tree = linkage(unit, method="average", metric="cosine")
    if config.min_silhouette > 0:
        labels = _by_silhouette(unit, tree, config.min_silhouette, count.at_most or 8)
    else:
        labels = fcluster(tree, t=config.distance, criterion="distance") - 1
    found = len(np.unique(labels))
    wanted = count.clamp(found, n)
    if wanted != found:
        labels = fcluster(tree, t=wanted, criterion="maxclust") - 1
    labels = _fold_small(
        unit, weights, labels, config.min_speaker_s, keep=max(count.exactly or 0, count.at_least)
    )
    centroids = _centroids(unit, weights, labels)
    labels = np.argmax(unit @ centroids.T, axis=1)  # each to its nearest speaker
    return _by_appearance(labels)


def _by_silhouette(
    unit: np.ndarray, tree: np.ndarray, min_silhouette: float, most: int
) -> np.ndarray:
    """The cut of ``tree`` into 2..``most`` clusters with the best mean silhouette (cosine),
    or one cluster when none reaches ``min_silhouette``."""
    from scipy.cluster.hierarchy import fcluster

    distances = 1.0 - unit @ unit.T
    best, best_score = np.zeros(len(unit), dtype=int), min_silhouette
    for k in range(2, min(most, len(unit) - 1) + 1):
        labels = fcluster(tree, t=k, criterion="maxclust") - 1
        score = _silhouette(distances, labels)
        if score > best_score:
            best, best_score = labels, score
    return best


def _silhouette(distances: np.ndarray, labels: np.ndarray) -> float:
    clusters = np.unique(labels)
    if len(clusters) < 2:
        return -1.0
    member = labels[:, None] == clusters[None, :]  # (n, k)
    sizes = member.sum(axis=0)
    mean_to = (distances @ member) / np.maximum(sizes - member, 1)  # own cluster: without i
    own = mean_to[member]
    other = np.where(member, np.inf, mean_to).min(axis=1)
    scores = np.where(
        sizes[labels] > 1, (other - own) / np.maximum(np.maximum(own, other), 1e-9), 0.0
    )
    return float(scores.mean())


def _centroids(unit: np.ndarray, weights: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return _unit(
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


def diarize_windows(
    windows: Sequence[WindowSpeakers],
    frame_step: float,
    config: RecordingClustering,
    count: SpeakerCount = SpeakerCount(),
) -> TimelineSnapshot:
    """Every window of a recording (as ``StreamDiarizer.observe`` gives them) → who spoke
    when, every turn settled.

    As pyannote reconstructs: each frame's number of speakers is the windows' mean count
    of active local speakers (those without an embedding included), and that many of the
    recording's speakers, the most active there, speak in it. A plain mean of activity
    would lose a voice wherever a window had too little of it alone to embed."""
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
    labels = cluster(np.array(vectors).reshape(len(vectors), -1), np.array(weights), config, count)
    speaker_of = {place: int(label) for place, label in zip(where, labels)}
    speakers = int(labels.max()) + 1 if len(labels) else 0
    if not windows:
        return TimelineSnapshot((), 0.0, 0)
    firsts = [int(round(window.start / frame_step)) for window in windows]
    frames = max(first + len(window.activity) for first, window in zip(firsts, windows))
    scores = np.zeros((frames, speakers))
    counts = np.zeros(frames)
    seen = np.zeros(frames)
    for w, (first, window) in enumerate(zip(firsts, windows)):
        rows = slice(first, first + len(window.activity))
        active = window.activity > config.active_threshold
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


def observe_recording(
    models: SpeakerModel, audio: np.ndarray, config: DiarizationConfig, step_s: float
) -> list[WindowSpeakers]:
    """The models' part over a whole recording: the live window (``config.window_s``)
    every ``step_s``, the last one ending where the recording does."""
    diarizer = StreamDiarizer(
        models, replace(config, step_s=step_s, latency_s=max(config.latency_s, step_s))
    )
    shortest = config.min_window_s * SAMPLE_RATE
    windows = [
        diarizer.observe(window, start)
        for window, start, _ in diarizer.windows(audio)
        if len(window) >= shortest
    ]
    covered = int(len(audio) // int(step_s * SAMPLE_RATE) * int(step_s * SAMPLE_RATE))
    if covered < len(audio) and len(audio) >= shortest:  # the tail after the last step
        start = max(0, len(audio) - int(config.window_s * SAMPLE_RATE))
        windows.append(diarizer.observe(audio[start:], start / SAMPLE_RATE))
    return windows
