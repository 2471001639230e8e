"""Linking each window's local speakers to the session's global speakers (pure numpy).

As in diart's online clustering: cosine distances between the window's speaker
embeddings and the global centroids, a constrained assignment (two local speakers
never map to one global speaker, Hungarian algorithm), a new global speaker when
nobody is close enough, and centroid updates from confident local speakers. Three
additions keep the count right when windows are short of evidence (a new turn's
first half second, a noisy recording, steps skipped under load):

- only a local speaker heard alone for ``min_new_speaker_s`` in its window may found
  a new speaker (``min_update_s`` to move a centroid); a shorter one may only join
  someone close;
- a speaker is *confirmed* once heard alone for ``min_speaker_s`` of new audio in
  total; until then it is shown as the closest confirmed speaker;
- two speakers whose centroids come within ``merge_distance`` are merged, the newer
  into the older, and shown as one from then on;
- a second look at every speaker's *samples* of its voice (one embedding per
  ``sample_every_s`` of fresh audio heard alone): when they fall in two groups less
  alike than ``split_similarity``, relative to each group's own spread (the mean
  cosine between two of its samples), two voices were linked as one (a new voice
  close to a known one when it first spoke): the group without the first sample
  becomes a new speaker, and each keeps its own centroid from then on. Relative,
  because voices differ in how much their own embeddings spread: a clean synthetic
  voice repeats itself almost exactly, a real voice on a noisy line does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

from parley.core.spectral_graph import unit_rows

# Speakers merged away keep their index (the timeline's columns and earlier snapshots name
# them), so the founded ones are capped, to bound a long session's memory; past the cap a
# new voice joins the closest speaker, as when max_speakers are all taken.
FOUNDED_PER_SPEAKER = 8
MAX_SAMPLES = 48  # samples kept of each voice (thinned out evenly past this)
SPREAD_RANGE = (0.3, 0.99)  # a measured spread is kept inside this (a few samples can lie)


@dataclass(frozen=True)
class ClusteringConfig:
    """The thresholds of the online linking of windows' speakers to a stream's speakers."""

    max_speakers: int = 8
    new_speaker_distance: float = 0.45  # cosine distance above which a speaker is someone new
    merge_distance: float = 0.15  # centroids this close are one speaker
    active_threshold: float = 0.5  # peak activity for a local speaker to count at all
    min_new_speaker_s: float = 0.5  # seconds alone in a window to found a speaker
    min_update_s: float = 1.0  # seconds alone in a window to move a centroid
    min_speaker_s: float = 2.0  # seconds alone in all, before a speaker is shown
    stale_windows: int = 120  # an unconfirmed speaker unheard this long is retired
    split_similarity: float = 0.85  # two groups of samples less alike (relative) are two
    sample_every_s: float = 1.0  # fresh seconds alone between two samples of a voice
    min_split_samples: int = 4  # samples each group needs before a split
    voice_similarity: float = 0.8  # spread of a voice with one sample (a prior)

    def __post_init__(self) -> None:
        if not 1 <= self.max_speakers <= 64:
            raise ValueError("max_speakers must be between 1 and 64")
        if not 0.0 < self.new_speaker_distance < 2.0:
            raise ValueError("new_speaker_distance is a cosine distance, between 0 and 2")
        if not 0.0 <= self.merge_distance < self.new_speaker_distance:
            raise ValueError("merge_distance must be below new_speaker_distance")
        if not 0.0 < self.voice_similarity < 1.0:
            raise ValueError("voice_similarity is a cosine between 0 and 1")


@dataclass(frozen=True)
class LocalSpeakers:
    """One window's local speakers, as the clustering needs them."""

    embeddings: np.ndarray  # (local, dim); NaN rows: too little audio to embed
    peak_activity: np.ndarray  # (local,) highest segmentation probability in the window
    alone_s: np.ndarray  # (local,) seconds heard alone in the window
    fresh_alone_s: np.ndarray  # (local,) of those, seconds in audio no earlier window had


def spread(samples: np.ndarray, prior: float) -> float:
    """Mean cosine between two of ``samples`` (unit rows), shrunk toward ``prior`` by one
    pseudo-pair, inside SPREAD_RANGE."""
    n = len(samples)
    total = samples.sum(axis=0)
    measured = (float(total @ total) - n + 2 * prior) / (n * (n - 1) + 2)
    return float(np.clip(measured, *SPREAD_RANGE))


def two_groups(samples: np.ndarray, rounds: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Two-means on unit rows (cosine), started from the two least alike: each group's
    row indices."""
    alike = samples @ samples.T
    first, second = np.unravel_index(int(np.argmin(alike)), alike.shape)
    centres = samples[[first, second]]
    labels = np.zeros(len(samples), dtype=int)
    for _ in range(rounds):
        labels = np.argmax(samples @ centres.T, axis=1)
        if labels.min() == labels.max():
            break
        centres = unit_rows(np.stack([samples[labels == k].sum(axis=0) for k in (0, 1)]))
    return np.flatnonzero(labels == 0), np.flatnonzero(labels == 1)


def relative_similarity(a: np.ndarray, b: np.ndarray, prior: float) -> float:
    """How alike two groups of unit samples are, relative to their own spreads: about 1
    for two groups of one voice, whatever the voice."""
    between = float(a.mean(axis=0) @ b.mean(axis=0))
    return between / np.sqrt(spread(a, prior) * spread(b, prior))


class OnlineClustering:
    """Global speakers of one stream: centroids, evidence, and who was merged into whom."""

    def __init__(self, config: ClusteringConfig):
        self.config = config
        self._sums: list[np.ndarray] = []
        self._evidence: list[float] = []
        self._merged_into: list[int | None] = []
        self._last_heard: list[int] = []  # the window count when each was last assigned
        self._voices: list[list[np.ndarray]] = []  # samples of each voice, oldest first
        self._since_sample: list[float] = []  # fresh seconds alone since the last sample
        self._windows = 0

    @property
    def size(self) -> int:
        """Global speakers ever founded, merged ones included (their indices stay valid)."""
        return len(self._sums)

    @property
    def speaker_count(self) -> int:
        """Confirmed speakers, not merged into another."""
        return sum(1 for i in self._live() if self.confirmed(i))

    def confirmed(self, speaker: int) -> bool:
        """Whether ``speaker`` has been heard alone long enough (``min_speaker_s``) to
        be shown."""
        return self._evidence[speaker] >= self.config.min_speaker_s

    def _live(self) -> list[int]:
        return [i for i, into in enumerate(self._merged_into) if into is None]

    def centroids(self, speakers: list[int]) -> np.ndarray:
        """The unit centroids of ``speakers``, one row each."""
        return unit_rows(np.stack([self._sums[i] for i in speakers]))

    def assign(
        self, local: LocalSpeakers, carried: Mapping[int, int] | None = None
    ) -> list[int | None]:
        """Global speaker index for each local speaker (None: inactive, no embedding, or too
        little evidence to found a speaker). ``carried``: local speakers that keep a global
        speaker from the window before, unembedded (``speaker_carry``): they are heard,
        and nobody else here is linked to their speakers."""
        config = self.config
        kept = {s: self._root(g) for s, g in (carried or {}).items()}
        usable = [
            i
            for i in range(len(local.embeddings))
            if i not in kept
            and local.peak_activity[i] >= config.active_threshold
            and not np.isnan(local.embeddings[i]).any()
        ]
        result: list[int | None] = [kept.get(i) for i in range(len(local.embeddings))]
        if not usable and not kept:
            return result
        for index, heard in kept.items():  # heard, so counted toward its next sample too
            self._evidence[heard] += float(local.fresh_alone_s[index])
            self._since_sample[heard] += float(local.fresh_alone_s[index])
            self._last_heard[heard] = self._windows
            vector = local.embeddings[index]
            if local.alone_s[index] >= config.min_update_s and not np.isnan(vector).any():
                self._sums[heard] = self._sums[heard] + unit_rows(vector)
        vectors = unit_rows(local.embeddings[usable]) if usable else np.zeros((0, 0))
        live = [g for g in self._live() if g not in kept.values()]
        matched: dict[int, int] = {}
        distances = None
        if live and usable:
            distances = 1.0 - vectors @ self.centroids(live).T
            rows, cols = linear_sum_assignment(distances)
            matched = {
                r: live[c]
                for r, c in zip(rows, cols)
                if distances[r, c] <= config.new_speaker_distance
            }
        room = config.max_speakers - len(self._live())
        for row, index in enumerate(usable):
            strong = local.alone_s[index] >= config.min_new_speaker_s
            if row in matched:
                result[index] = matched[row]
            elif strong and room > 0 and self.size < FOUNDED_PER_SPEAKER * config.max_speakers:
                room -= 1
                result[index] = self._found(np.zeros_like(vectors[row]), [], 0.0)
            elif strong and distances is not None:
                # No room for anyone new: the closest speaker not already taken here.
                taken = {g for g in result if g is not None}
                free = [live[c] for c in np.argsort(distances[row]) if live[c] not in taken]
                result[index] = free[0] if free else None
        for row, index in enumerate(usable):
            speaker = result[index]
            if speaker is None:
                continue
            self._evidence[speaker] += float(local.fresh_alone_s[index])
            self._last_heard[speaker] = self._windows
            founded = not self._sums[speaker].any()
            if founded or local.alone_s[index] >= config.min_update_s:
                self._sums[speaker] = self._sums[speaker] + vectors[row]
            if local.alone_s[index] >= config.min_update_s:
                self._sample(speaker, vectors[row], float(local.fresh_alone_s[index]))
        self._windows += 1
        self._merge_converged()
        self._split_mixed()
        self._retire_stale()
        return result

    def _found(
        self,
        centroid_sum: np.ndarray,
        voice: list[np.ndarray],
        evidence: float,
        last_heard: int | None = None,
    ) -> int:
        self._sums.append(centroid_sum)
        self._evidence.append(evidence)
        self._merged_into.append(None)
        self._last_heard.append(self._windows if last_heard is None else last_heard)
        self._voices.append(voice)
        self._since_sample.append(0.0)
        return len(self._sums) - 1

    def _sample(self, speaker: int, vector: np.ndarray, fresh_s: float) -> None:
        """Keep ``vector`` as a sample of the speaker's voice, once every sample_every_s of
        fresh audio (windows overlap: samples closer in time share most of their audio)."""
        self._since_sample[speaker] += fresh_s
        voice = self._voices[speaker]
        if voice and self._since_sample[speaker] < self.config.sample_every_s:
            return
        voice.append(vector)
        self._since_sample[speaker] = 0.0
        if len(voice) > MAX_SAMPLES:  # thin out evenly
            self._voices[speaker] = voice[1::2]

    def _split_mixed(self) -> None:
        """A speaker whose samples fall in two groups less alike than split_similarity is
        two voices: the group without its first sample becomes a new speaker, with its
        share of the evidence; each group's samples are its centroid from then on. At
        most one split a step (the next step looks again)."""
        config = self.config
        live = self._live()
        if (
            len(live) >= config.max_speakers
            or self.size >= FOUNDED_PER_SPEAKER * config.max_speakers
        ):
            return
        for speaker in live:
            voice = np.array(self._voices[speaker])
            if len(voice) < 2 * config.min_split_samples:
                continue
            first, second = two_groups(voice)
            if min(len(first), len(second)) < config.min_split_samples:
                continue
            if (
                relative_similarity(voice[first], voice[second], config.voice_similarity)
                >= config.split_similarity
            ):
                continue
            keep, leave = (first, second) if 0 in first else (second, first)
            share = self._evidence[speaker] * len(leave) / len(voice)
            self._sums[speaker] = voice[keep].sum(axis=0)
            self._voices[speaker] = list(voice[keep])
            self._evidence[speaker] -= share
            self._found(
                voice[leave].sum(axis=0), list(voice[leave]), share, self._last_heard[speaker]
            )
            return

    def _retire_stale(self) -> None:
        """An unconfirmed speaker unheard for ``stale_windows`` was a stray window (noise,
        a cough, a blend of voices): it is merged into the speaker it is shown as, which
        changes no label and frees its place for a real newcomer."""
        shown = self.aliases()
        for speaker in self._live():
            if (
                not self.confirmed(speaker)
                and shown[speaker] != speaker
                and self._windows - self._last_heard[speaker] > self.config.stale_windows
            ):
                self._merged_into[speaker] = shown[speaker]

    def _merge_converged(self) -> None:
        while True:
            live = self._live()
            if len(live) < 2:
                return
            distances = 1.0 - self.centroids(live) @ self.centroids(live).T
            np.fill_diagonal(distances, np.inf)
            a, b = np.unravel_index(int(np.argmin(distances)), distances.shape)
            if distances[a, b] > self.config.merge_distance:
                return
            older, newer = live[min(a, b)], live[max(a, b)]
            self._sums[older] = self._sums[older] + self._sums[newer]
            self._evidence[older] += self._evidence[newer]
            self._voices[newer] = []  # the older's own samples stay its voice's
            self._merged_into[newer] = older

    def _root(self, speaker: int) -> int:
        while (into := self._merged_into[speaker]) is not None:
            speaker = into
        return speaker

    def voices(self) -> tuple[int, ...]:
        """Who each global speaker is, as far as the linking knows: the speaker it was
        merged into, else itself, confirmed or not (a newcomer is a voice of its own
        before it has been heard long enough to be shown)."""
        return tuple(self._root(speaker) for speaker in range(len(self._sums)))

    def aliases(self) -> tuple[int, ...]:
        """Who each global speaker is shown as: itself once confirmed; the speaker it was
        merged into; else the closest confirmed speaker. While nobody is confirmed, every
        voice is shown as the first one heard: a second voice gets no label of its own
        before it has been heard alone for min_speaker_s, at the start of a stream too
        (a short call whose caller is not yet confirmed must not show a second label)."""
        live = self._live()
        shown = [i for i in live if self.confirmed(i)] or live[:1]
        out: list[int] = []
        for root in self.voices():
            if root not in shown and shown:
                distances = 1.0 - self.centroids([root]) @ self.centroids(shown).T
                root = shown[int(np.argmin(distances[0]))]
            out.append(root)
        return tuple(out)
