"""Turns with hysteresis in time: who speaks each word, and where a settled turn changes.

Diarization labels are noisy near turn boundaries and in short stretches, so a run
shorter than ``min_turn_s`` never makes a turn of its own unless pauses set it apart
(a lone "Yes." between pauses is a turn; "everyone" in mid-sentence is not). The
same rule finds where a final should end: at the first change between two runs of
at least ``min_turn_s`` each, the change at least ``change_latency_s`` old. That is
shorter than the diarization latency (how long labels may still change), so a final
is cut as soon as windows enough have heard the change, and later windows may still
correct who said its words (with a ``speaker_update``).
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

Span = tuple[float, float]
CELL_S = 0.1  # the grid on which a snapshot is read to find a change
UNCUT_KEPT = 4096  # changes left uncut that a stream remembers (a float each)
UNCUT_RECHECKED = 16  # the newest of them a change read again is matched against


@dataclass(frozen=True)
class TurnConfig:
    """How words are joined into turns of one speaker, and when a turn change cuts a final."""

    min_turn_s: float = 1.0  # shorter runs join a neighbour unless pauses set them apart
    pause_s: float = 0.3  # a gap this long between words sets runs apart
    cut_search_s: float = 0.2  # a speaker-change cut goes to the quietest frame this near
    # How old a change must be before a final is cut there. At min_turn_s the cuts come a
    # second sooner, as many true changes cut, but sample.wav in real time then loses its
    # interjection's speaker (bench/VARIANTS.md, "Finals cut at a speaker change").
    change_latency_s: float = 2.0
    # A younger change, at least this old, cuts at once when the step before read it at
    # the same place (within confirm_tolerance_s) and nobody else was heard before it in
    # the open segment: a true change is read again where it was, a flicker within one
    # voice mostly is not (None: only change_latency_s cuts). bench/VARIANTS.md, "Finals
    # cut at a speaker change": as right as 2 s alone, 0.4 s sooner at the median.
    confirm_latency_s: float | None = 1.0
    confirm_tolerance_s: float = 0.3
    # A change first found this long after it (the open segment's end past it) is not
    # cut: its final would come that late. The segment runs on to a pause or a later
    # change, and the change still parts its words as a cut would (``parts_at``), so an
    # interjection keeps its speaker, and a voice the segment's decode dropped is
    # decoded again alone (``sessions.voice_parts``) (None: every change cuts, however
    # late). At 2 s, no longer than change_latency_s, the changes cut are the confirmed
    # ones: 0.91 of them right on dev against 0.68 at 2.5 s, and ten labelled streams'
    # max final latency about 1 s lower, within 3 s in a quiet sitting (bench/VARIANTS.md,
    # "Finals cut at a speaker change").
    max_cut_age_s: float | None = 2.0

    def __post_init__(self) -> None:
        durations = (self.min_turn_s, self.pause_s, self.cut_search_s, self.change_latency_s)
        if min((*durations, self.confirm_latency_s or 0.0, self.confirm_tolerance_s)) < 0:
            raise ValueError("turn settings are durations: none may be negative")


class Speaking(Protocol):
    """Who spoke when, as far as heard (a ``TimelineSnapshot``)."""

    @property
    def settled_until(self) -> float:
        """Labels before this will not change."""

    @property
    def heard_until(self) -> float:
        """The end of the audio heard so far."""

    def speaking(self, start: float, end: float) -> int | None:
        """The speaker who overlaps [start, end] the most (None: nobody does)."""

    def between(self, start: float, end: float) -> Speaking:
        """The same, keeping only what overlaps [start, end] (to read it many times)."""


@dataclass
class _Run:
    first: int  # index of its first item
    last: int  # index of its last item
    label: int | None


def _runs(labels: Sequence[int | None]) -> list[_Run]:
    runs: list[_Run] = []
    for i, label in enumerate(labels):
        if runs and runs[-1].label == label:
            runs[-1].last = i
        else:
            runs.append(_Run(i, i, label))
    return runs


def smooth_labels(
    spans: Sequence[Span], labels: Sequence[int | None], config: TurnConfig = TurnConfig()
) -> list[int | None]:
    """Labels of consecutive ``spans`` (words), with short runs joined to a neighbour.

    Unlabelled items take the label of the run before them (or after, at the start).
    Then a run under ``min_turn_s`` that no pause sets apart from a neighbour joins it:
    first the runs between two runs of one speaker (A b A is A's), shortest first; then
    the others, to the nearer neighbour.
    """
    out = _fill_gaps(list(labels))
    while True:
        runs = _runs(out)
        joins = []
        for k, run in enumerate(runs):
            length = spans[run.last][1] - spans[run.first][0]
            if length < config.min_turn_s:
                target = _join_target(runs, k, spans, config.pause_s)
                if target is not None:
                    joins.append((not _between_one_speaker(runs, k), length, k, target))
        if not joins:
            return out
        *_, k, target = min(joins)
        out[runs[k].first : runs[k].last + 1] = [target] * (runs[k].last - runs[k].first + 1)


def parts_at(spans: Sequence[Span], at: Sequence[float]) -> list[slice]:
    """``spans`` (words, in order) in parts at each time of ``at``, as finals cut there
    would hold them (a word goes with the side its middle is on)."""
    parts, first = [], 0
    for boundary in sorted(at):
        last = first
        while last < len(spans) and sum(spans[last]) / 2 < boundary:
            last += 1
        if last > first:
            parts.append(slice(first, last))
            first = last
    if first < len(spans) or not parts:  # the words after the last time (or none at all)
        parts.append(slice(first, len(spans)))
    return parts


def _between_one_speaker(runs: list[_Run], k: int) -> bool:
    return 0 < k < len(runs) - 1 and runs[k - 1].label == runs[k + 1].label


def _fill_gaps(labels: list[int | None]) -> list[int | None]:
    known = [label for label in labels if label is not None]
    previous = known[0] if known else None
    out = []
    for label in labels:
        previous = label if label is not None else previous
        out.append(previous)
    return out


def _join_target(runs: list[_Run], k: int, spans: Sequence[Span], pause_s: float) -> int | None:
    run = runs[k]
    before = runs[k - 1] if k > 0 else None
    after = runs[k + 1] if k + 1 < len(runs) else None
    gap_before = spans[run.first][0] - spans[before.last][1] if before else math.inf
    gap_after = spans[after.first][0] - spans[run.last][1] if after else math.inf
    near_before, near_after = gap_before < pause_s, gap_after < pause_s
    if before and after and before.label == after.label and (near_before or near_after):
        return before.label
    if before and near_before and gap_before <= gap_after:
        return before.label
    if after and near_after:
        return after.label
    return None


def settled_change(
    snapshot: Speaking, start: float, end: float, config: TurnConfig = TurnConfig()
) -> float | None:
    """The first time in [start, end] where one speaker's run of at least ``min_turn_s``
    gives way to another's, the change itself settled or at least ``change_latency_s``
    old (None: no such change yet). The runs are read up to the newest audio heard: the
    newer speaker's ``min_turn_s`` is what tells a turn from a flicker, and waiting for
    all of it to age as well would add ``min_turn_s`` to every such final's latency."""
    return _SegmentTurns(snapshot, start, end, config).first_change(config.change_latency_s)


class _SegmentTurns:
    """One snapshot read over an open segment: who speaks each CELL_S, smoothed into
    runs once (and only when asked), for changes of any age to be looked up."""

    def __init__(self, snapshot: Speaking, start: float, end: float, config: TurnConfig):
        self.heard = max(snapshot.settled_until, snapshot.heard_until)
        self._snapshot = snapshot
        self._start = start
        self._until = min(end, self.heard)
        self._config = config

    @cached_property
    def voiced(self) -> list[tuple[Span, int]]:
        """Who speaks each CELL_S of the segment heard, the cells where someone does."""
        start, until = self._start, self._until
        cells = int((until - start) / CELL_S)
        spans = [(start + i * CELL_S, start + (i + 1) * CELL_S) for i in range(max(cells, 0))]
        view = self._snapshot.between(start, until)
        labels = [view.speaking(a, b) for a, b in spans]
        return [(span, label) for span, label in zip(spans, labels) if label is not None]

    @cached_property
    def _runs(self) -> list[_Run]:
        voiced = self.voiced
        spans, labels = [s for s, _ in voiced], [label for _, label in voiced]
        return _runs(smooth_labels(spans, labels, self._config)) if voiced else []

    def first_change(self, latency_s: float, after: float = -math.inf) -> float | None:
        """``settled_change`` with changes ``latency_s`` old counted, and none at or
        before ``after``."""
        return next((c for c in self.changes(latency_s) if c > after), None)

    def changes(self, latency_s: float) -> Iterator[float]:
        """Every change ``latency_s`` old, in order."""
        changed_by = max(self._snapshot.settled_until, self.heard - latency_s)
        if changed_by <= self._start:
            return
        voiced, runs = self.voiced, self._runs
        for previous, run in zip(runs, runs[1:]):
            change = (voiced[previous.last][0][1] + voiced[run.first][0][0]) / 2
            if change > changed_by:
                return  # this change and any later one are too new
            lengths = [voiced[r.last][0][1] - voiced[r.first][0][0] for r in (previous, run)]
            if min(lengths) >= self._config.min_turn_s:
                yield change


class ChangeCuts:
    """Where one stream's open segment should be cut at a turn change, read once per
    diarization step: a change ``change_latency_s`` old, or (with ``confirm_latency_s``)
    a younger one that the previous step read at the same place, with one voice only
    before it. Steps are told apart by how far they have heard, so reading one step
    again confirms nothing."""

    def __init__(self, config: TurnConfig = TurnConfig()):
        self._config = config
        self._previous: tuple[float, float, float] | None = None  # (heard, start, change)
        # The changes found too late to cut (``max_cut_age_s``), for the words either side
        # to keep their own speakers (``uncut_between``); the newest few thousand.
        self._uncut: deque[float] = deque(maxlen=UNCUT_KEPT)

    def uncut_between(self, start: float, end: float) -> list[float]:
        """The changes in (start, end) that were found too late to cut there."""
        return [change for change in self._uncut if start < change < end]

    def read(self, snapshot: Speaking, start: float, end: float) -> float | None:
        """The cut in [start, end] (None: not yet)."""
        config = self._config
        turns = _SegmentTurns(snapshot, start, end, config)
        stale = -math.inf if config.max_cut_age_s is None else end - config.max_cut_age_s
        settled = None
        for change in turns.changes(config.change_latency_s):  # one pass: cut or keep
            if change > stale:
                settled = change
                break
            recent = itertools.islice(reversed(self._uncut), UNCUT_RECHECKED)
            if all(abs(change - kept) > config.confirm_tolerance_s for kept in recent):
                self._uncut.append(change)
        if settled is not None or config.confirm_latency_s is None:
            return settled
        young = turns.first_change(config.confirm_latency_s, stale)
        previous = self._previous
        if young is None:
            self._previous = None
            return None
        if previous is not None and previous[0] == turns.heard:
            return None  # the same step read again: keep what the step before it read
        self._previous = (turns.heard, start, young)
        agreed = (
            previous is not None
            and previous[1] == start
            and abs(previous[2] - young) <= config.confirm_tolerance_s
        )
        if not agreed:
            return None
        # Another voice heard before it, however briefly, may yet prove a turn of its
        # own once older: cutting here would leave that change behind the open segment.
        before = {label for span, label in turns.voiced if span[1] <= young - CELL_S + 1e-9}
        return young if len(before) <= 1 else None
