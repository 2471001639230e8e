"""Rolling aggregation of windowed speaker activity into a stable speaker timeline (pure).

Each diarization step gives the activity of global speakers over one window (say
the last 5 s, every 0.5 s), so every moment is seen by several overlapping windows.
Their activities are averaged on a global frame grid. Where they dispute who speaks,
so that no speaker reaches the onset though together they pass it (one window took a
newcomer's first half second, heard at its very end, for the voice before; the next
heard it in its middle and knew it), the plain mean would leave that speech to nobody
and a turn change would be read in the middle of the gap. There the activities
weighted by a Hamming window over each window decide, as pyannote aggregates its
windows: a window's middle counts most. Weighting every frame so cost sample.wav's
word labels (bench/VARIANTS.md, "Disputed frames"). A frame is *settled* once it is
``latency`` seconds old: its label will not change after that, and it leaves the
rolling buffers, which therefore stay the size of one window plus the latency.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from parley.core.word_timing import joined

NEAREST_S = 1.0  # a word between turns takes the speaker of a turn this near


@dataclass(frozen=True)
class Turn:
    """A stretch of stream time one speaker spoke."""

    start: float
    end: float
    speaker: int


@dataclass(frozen=True)
class TimelineSnapshot:
    """Who spoke when: settled turns up to ``settled_until``, provisional ones after it,
    up to ``heard_until`` (the end of the audio the windows have heard)."""

    turns: tuple[Turn, ...]
    settled_until: float
    speaker_count: int
    aliases: tuple[int, ...] = ()  # diarization's speaker i is shown as aliases[i]
    heard_until: float = 0.0
    # The same turns by voice: a newcomer not yet shown (it is shown as someone else
    # until heard long enough) is a speaker of its own here, so a turn that passes to
    # it can end a final before its label exists.
    voice_turns: tuple[Turn, ...] = ()
    # A stream's last step, and its checkpoints: its kept windows' voices clustered at
    # once, as a recording's are (``speaker_relabel``), to relabel its settled finals;
    # and, at a checkpoint (None at the end), the shown speaker that takes over each of
    # that timeline's speakers from then on.
    closing: TimelineSnapshot | None = None
    taken_over: Mapping[int, int] | None = None
    # Speaker → the name of the known speaker (a client's clip) its voice matches.
    names: Mapping[int, str] = field(default_factory=dict)

    def speaker_of(self, start: float, end: float) -> int | None:
        """The speaker who overlaps [start, end] the most, else the nearest within a
        second (None: nobody)."""
        speaker = self.speaking(start, end)
        return self._nearest(start, end) if speaker is None else speaker

    def speaking(self, start: float, end: float) -> int | None:
        """The speaker who overlaps [start, end] the most (None: nobody does)."""
        overlap: dict[int, float] = {}
        for turn in self.turns:
            shared = min(end, turn.end) - max(start, turn.start)
            if shared > 0:
                overlap[turn.speaker] = overlap.get(turn.speaker, 0.0) + shared
        return max(overlap, key=lambda speaker: overlap[speaker]) if overlap else None

    def speech(self, start: float, end: float) -> list[tuple[float, float]]:
        """Where anyone speaks in [start, end], sorted and disjoint; what the windows have
        not heard yet (after ``heard_until``) counts as speech."""
        spans = [
            (max(t.start, start), min(t.end, end))
            for t in self.turns
            if t.end > start and t.start < end
        ]
        if end > self.heard_until:
            spans.append((max(start, self.heard_until), end))
        return joined(sorted(spans))

    def by_voice(self) -> TimelineSnapshot:
        """This snapshot with its turns by voice (``voice_turns``)."""
        return TimelineSnapshot(
            self.voice_turns, self.settled_until, self.speaker_count, (), self.heard_until
        )

    def between(self, start: float, end: float) -> TimelineSnapshot:
        """This snapshot with only the turns that overlap [start, end]."""
        turns = tuple(t for t in self.turns if t.end > start and t.start < end)
        return TimelineSnapshot(
            turns, self.settled_until, self.speaker_count, self.aliases, self.heard_until
        )

    def _nearest(self, start: float, end: float) -> int | None:
        # Short words between turns (breaths, "uh") go to the closest turn nearby.
        middle = (start + end) / 2
        best, distance = None, NEAREST_S
        for turn in self.turns:
            gap = max(turn.start - middle, middle - turn.end, 0.0)
            if gap < distance:
                best, distance = turn.speaker, gap
        return best


class TurnsByTime:
    """A snapshot's turns (sorted by start) found by time in O(log n), to label many
    finals against a long timeline: a whole stream's, at its closing relabel."""

    def __init__(self, snapshot: TimelineSnapshot):
        self._snapshot = snapshot
        self._starts = [turn.start for turn in snapshot.turns]
        self._longest = max((turn.end - turn.start for turn in snapshot.turns), default=0.0)

    def around(self, start: float, end: float) -> TimelineSnapshot:
        """The snapshot with only the turns that can name a speaker in [start, end]: those
        that overlap it or end within NEAREST_S of it (and a few more)."""
        low = bisect_left(self._starts, start - NEAREST_S - self._longest)
        high = bisect_right(self._starts, end + NEAREST_S)
        return replace(self._snapshot, turns=self._snapshot.turns[low:high])


@dataclass
class SpeakerTimeline:
    """A stream's speaker activity, averaged over overlapping windows, settling with a latency."""

    frame_step: float
    latency: float
    onset: float = 0.5  # mean activity above which a speaker is speaking
    keep_seconds: float = 120  # settled history kept for labelling late finals
    _sums: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    _counts: np.ndarray = field(default_factory=lambda: np.zeros(0))
    _weighted: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    _weights: np.ndarray = field(default_factory=lambda: np.zeros(0))
    _origin: int = 0  # global frame index of _sums[0]
    _settled: list[Turn] = field(default_factory=list)
    _open: dict[int, float] = field(default_factory=dict)  # speaker → start of a running turn

    def add_window(self, start: float, activity: np.ndarray) -> None:
        """``activity``: (frames, global speakers) for a window that begins at ``start``."""
        first = int(round(start / self.frame_step))
        frames, speakers = activity.shape
        weights = np.hamming(frames)
        self._grow(first + frames, speakers)
        offset = first - self._origin
        if offset < 0:  # the part before the settled edge is history now
            activity, weights = activity[-offset:], weights[-offset:]
            frames, offset = frames + offset, 0
        rows = slice(offset, offset + frames)
        self._sums[rows, :speakers] += activity
        self._counts[rows] += 1
        self._weighted[rows, :speakers] += activity * weights[:, None]
        self._weights[rows] += weights

    def _grow(self, end_frame: int, speakers: int) -> None:
        rows = max(end_frame - self._origin, self._sums.shape[0])
        cols = max(speakers, self._sums.shape[1] if self._sums.size else 0)
        if (rows, cols) != self._sums.shape:
            self._sums, self._weighted = (
                _padded(a, (rows, cols)) for a in (self._sums, self._weighted)
            )
            self._counts, self._weights = (
                _padded(a, (rows,)) for a in (self._counts, self._weights)
            )

    def _labels(self, rows: slice) -> np.ndarray:
        mean = self._sums[rows] / np.maximum(self._counts[rows], 1)[:, None]
        labels = mean > self.onset
        # Someone speaks (the speakers' means add up past the onset), nobody by himself.
        disputed = ~labels.any(axis=1) & (mean.sum(axis=1) > self.onset)
        if disputed.any():  # a disputed frame was heard, so its weight is above 0
            weights = self._weights[rows][disputed][:, None]
            labels[disputed] = self._weighted[rows][disputed] / weights > self.onset
        return labels

    def advance(self, now: float, final: bool = False) -> None:
        """Settle every frame older than ``now - latency`` (every frame, if ``final``)."""
        if final:
            settle_to = len(self._counts)
        else:
            settle_to = min(
                int((now - self.latency) / self.frame_step) - self._origin, len(self._counts)
            )
        if settle_to <= 0:
            if final:
                self._close_turns(self._origin * self.frame_step)
            return
        labels = self._labels(slice(0, settle_to))
        for i, row in enumerate(labels):
            t = (self._origin + i) * self.frame_step
            self._step_turns(row, t)
        self._sums, self._counts = self._sums[settle_to:], self._counts[settle_to:]
        self._weighted, self._weights = self._weighted[settle_to:], self._weights[settle_to:]
        self._origin += settle_to
        horizon = self._origin * self.frame_step - self.keep_seconds
        while self._settled and self._settled[0].end < horizon:
            self._settled.pop(0)
        if final:
            self._close_turns(self._origin * self.frame_step)

    def _close_turns(self, at: float) -> None:
        for speaker, start in sorted(self._open.items()):
            if start < at:
                self._settled.append(Turn(start, at, speaker))
        self._open.clear()
        self._settled.sort(key=lambda turn: (turn.start, turn.speaker))

    def _step_turns(self, row: np.ndarray, t: float) -> None:
        for speaker in range(len(row)):
            if row[speaker] and speaker not in self._open:
                self._open[speaker] = t
            elif not row[speaker] and speaker in self._open:
                self._settled.append(Turn(self._open.pop(speaker), t, speaker))

    def snapshot(self, aliases: Sequence[int] = (), voices: Sequence[int] = ()) -> TimelineSnapshot:
        """Turns as they stand, each speaker shown as ``aliases[speaker]`` (as itself when
        ``aliases`` has no entry for it), and by voice, as ``voices[speaker]``."""
        settled_until = self._origin * self.frame_step
        turns = list(self._settled)
        # Running turns and the unsettled frames, as they stand now.
        running = dict(self._open)
        labels = self._labels(slice(0, len(self._counts))) if len(self._counts) else None
        if labels is not None:
            seen = self._counts > 0
            for i, row in enumerate(labels):
                if not seen[i]:
                    continue
                t = (self._origin + i) * self.frame_step
                for speaker in range(len(row)):
                    if row[speaker] and speaker not in running:
                        running[speaker] = t
                    elif not row[speaker] and speaker in running:
                        turns.append(Turn(running.pop(speaker), t, speaker))
            end = (
                (self._origin + int(np.flatnonzero(seen)[-1]) + 1) * self.frame_step
                if seen.any()
                else settled_until
            )
        else:
            end = settled_until
        turns += [Turn(start, end, speaker) for speaker, start in running.items() if start < end]
        shown = _renamed(turns, aliases)
        return TimelineSnapshot(
            shown,
            settled_until,
            len({t.speaker for t in shown}),
            tuple(aliases),
            end,
            _renamed(turns, voices),
        )

    def settled_turns(self) -> list[Turn]:
        """The turns whose labels will no longer change."""
        return list(self._settled)


def _padded(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``array`` in the top left corner of zeros of ``shape``."""
    grown = np.zeros(shape)
    grown[tuple(slice(0, n) for n in array.shape)] = array
    return grown


def _renamed(turns: list[Turn], names: Sequence[int]) -> tuple[Turn, ...]:
    """``turns`` with speaker i as ``names[i]`` (as itself past the end of ``names``), in
    order of start."""
    renamed = [
        Turn(t.start, t.end, names[t.speaker] if t.speaker < len(names) else t.speaker)
        for t in turns
    ]
    return tuple(sorted(renamed, key=lambda turn: (turn.start, turn.speaker)))
