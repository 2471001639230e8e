"""Incremental diarization of one stream, in blocks as diart composes them.

Each step takes the latest window of audio and runs: segmentation (local speaker
activity, from the models) → embedding selection (``speaker_masks``) → embeddings
(the models) → assignment and clustering (``speakers``) → aggregation into the
rolling timeline (``speaker_timeline``). A thinned step (under load) embeds only the
local speakers that do not continue one of the window before (``speaker_carry``).
Thresholds live in the configs here; the tensor work lives behind the ``SpeakerModel``
protocol in ``parley.models``.
``whole_recording`` runs the same steps over a recording known in full.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from parley.core.audio import SAMPLE_RATE
from parley.core.speaker_carry import LinkedWindow, carried
from parley.core.speaker_count import SpeakerCount
from parley.core.speaker_masks import FrameGrid, SpeakerFrames
from parley.core.speaker_names import KnownVoices, named_voices
from parley.core.speaker_timeline import SpeakerTimeline, TimelineSnapshot
from parley.core.speakers import ClusteringConfig, LocalSpeakers, OnlineClustering
from parley.core.turns import TurnConfig

# Told the share of a recording its windows have heard so far (0 to 1).
Heard = Callable[[float], None]
# Called before each window of a recording's speaker work; returns once the live
# streams' steps have gone first (``DiarizationWorker.wait_quiet``).
LiveFirst = Callable[[], None]
# Past this much stream, a stream is relabelled only at its end: the clustering's cost
# grows with the windows kept (about 0.6 s for 2,400 embeddings, half an hour or so, on
# one core of this CPU), and a diarization thread clustering is one not stepping others.
RELABEL_UNTIL_S = 1800.0
# A checkpoint relabel comes at most every relabel_every_s, and at least this share of
# the stream apart, so that the clustering's cost stays a small share of the thread.
RELABEL_SHARE = 0.25
# A stream keeps one window this often for its closing relabel (its windows are computed
# live anyway): clustered with each linked to as many seconds of neighbours as a
# recording's (RecordingClustering.for_step), one a second labelled bench/devset.py's dev
# streams with about half the DER median of one in 2.5 s (bench/VARIANTS.md).
CLOSING_STEP_S = 1.0
# A stream's relabel needs this many seconds of kept windows: with fewer, each voice has
# too few embeddings for the graph to link (a voice heard 3 s had one), and the live
# linking, which saw every window, keeps its labels.
CLOSING_MIN_S = 30.0


@dataclass(frozen=True)
class DiarizationConfig:
    """The rolling window, its step, the labels' latency, and the linking and turn settings."""

    window_s: float = 5.0
    step_s: float = 0.5
    latency_s: float = 4.0  # how long a label may still change (see TurnConfig)
    # At its end, a stream no longer than closing_s has its windows (one every
    # CLOSING_STEP_S, about 10 MB an hour) clustered at once, as a recording's are, and its
    # finals relabelled (0: never; a longer stream keeps its live labels).
    closing_s: float = 7200.0
    # Every so often before its end (never past RELABEL_UNTIL_S, never closer than
    # RELABEL_SHARE of the stream), the windows kept so far are clustered the same way and
    # the settled finals relabelled, so that a long meeting's labels need not wait for its
    # end (0: only at the end). bench/VARIANTS.md, "What a client holds during a stream".
    relabel_every_s: float = 15.0
    speakers: SpeakerCount = SpeakerCount()  # what the stream's client says of its speakers
    active_probability: float = 0.5  # segmentation probability of a local speaker speaking
    min_alone_s: float = 0.5  # seconds alone to embed a speaker from those frames only
    min_window_s: float = 0.5  # shorter windows are not segmented
    # In a thinned step (a session's next after one skipped under load), a local speaker
    # that continues one of the window before keeps its link unembedded until heard
    # alone this long since its last embedding (speaker_carry; 0: never thinned).
    busy_reembed_s: float = 1.0
    clustering: ClusteringConfig = field(default_factory=ClusteringConfig)
    turns: TurnConfig = field(default_factory=TurnConfig)

    def for_count(self, count: SpeakerCount) -> DiarizationConfig:
        """This config for a stream whose client gave ``count``: the live linking founds no
        more speakers than it allows, and the closing relabel clusters into it."""
        most = count.exactly or count.at_most
        clustering = (
            self.clustering if most is None else replace(self.clustering, max_speakers=most)
        )
        return replace(self, speakers=count, clustering=clustering)

    def __post_init__(self) -> None:
        if not 0 < self.step_s <= self.window_s:
            raise ValueError("the diarization step must be positive and at most the window")
        if self.latency_s < self.step_s:
            raise ValueError("the diarization latency must be at least one step")
        if self.closing_s < 0:
            raise ValueError("the closing relabel's span is a duration: it may not be negative")
        if self.relabel_every_s < 0:
            raise ValueError("the relabels' interval is a duration: it may not be negative")
        if self.turns.change_latency_s > self.latency_s:
            # A change older than latency_s is settled, and a settled change cuts at once:
            # a longer change latency would be silently ignored.
            raise ValueError(
                f"the change latency ({self.turns.change_latency_s:g} s) must be at most the "
                f"diarization latency ({self.latency_s:g} s): a settled speaker change "
                "always cuts the final"
            )


@dataclass(frozen=True)
class WindowSpeakers:
    """What the models found in one window: its local speakers' activity and embeddings."""

    start: float  # stream time of the first frame
    activity: np.ndarray  # (frames, local) probabilities
    local: LocalSpeakers


class SpeakerModel(Protocol):
    """Segmentation and speaker embeddings (``parley.models.speaker_models``)."""

    @property
    def grid(self) -> FrameGrid:
        """Where ``segment``'s frames fall in a window."""

    def segment(self, windows: list[np.ndarray]) -> list[np.ndarray]:
        """Windows of (samples,) float32 audio → each one's (frames, local speakers)
        activity in [0, 1]; windows of one length share one forward pass."""

    def embed(self, window: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """Audio and (local, samples) bool masks → (local, dim); NaN rows: too little audio."""


class StreamDiarizer:
    """One stream's speakers and timeline; one thread steps it at a time."""

    def __init__(self, models: SpeakerModel, config: DiarizationConfig):
        self._models = models
        self.config = config
        self.clustering = OnlineClustering(config.clustering)
        self.timeline = SpeakerTimeline(models.grid.step, config.latency_s)
        self._seen_until = 0.0  # stream time up to which earlier windows heard the audio
        self._kept: deque[WindowSpeakers] = deque()  # for the closing relabel, oldest first
        self._kept_speakers: deque[tuple[int | None, ...]] = deque()  # their links, as made
        self._next_relabel = 0.0  # stream time of the next checkpoint relabel
        self._linked: LinkedWindow | None = None  # the last window linked, for the carry
        self.known: KnownVoices = ()  # the client's known speakers, whom its voices may match

    def step(
        self,
        window: np.ndarray,
        window_start: float,
        now: float,
        final: bool = False,
        activity: np.ndarray | None = None,
        thin: bool = False,
    ) -> TimelineSnapshot:
        """Add the window that ends at ``now`` (if long enough), settle what is older than
        the latency (everything, if ``final``), and return the timeline as it stands.
        ``activity``: the window's segmentation, where it was already computed (the
        diarization thread segments the due windows of all sessions in one pass).
        ``thin``: embed only the local speakers not carried over (``speaker_carry``), as
        a busy server does."""
        if self.segments(window):
            self.link(self.observe(window, window_start, activity, thin), thin)
        self.timeline.advance(now, final=final)
        snapshot = self.timeline.snapshot(self.clustering.aliases(), self.clustering.voices())
        return replace(snapshot, names=self.names()) if self.known else snapshot

    def names(self) -> dict[int, str]:
        """Shown speaker → the known speaker whose clip its voice (its centroid) matches."""
        shown = sorted(set(self.clustering.aliases())) if self.known else []
        return named_voices({s: self.clustering.centroids([s])[0] for s in shown}, self.known)

    def _keeps(self, start: float) -> bool:
        """Whether the window starting at ``start`` will be kept for the closing relabel."""
        return self.config.closing_s > 0 and (
            not self._kept or start >= self._kept[-1].start + CLOSING_STEP_S
        )

    def _keep(self, window: WindowSpeakers, speakers: tuple[int | None, ...]) -> None:
        """Keep one window every CLOSING_STEP_S, of the last ``closing_s``, with the stream
        speaker each of its local speakers was linked to."""
        span = self.config.closing_s
        if not self._keeps(window.start):
            return
        compact = WindowSpeakers(  # half the memory: about 10 MB a stream-hour
            window.start,
            window.activity.astype(np.float16),
            replace(window.local, embeddings=window.local.embeddings.astype(np.float16)),
        )
        self._kept.append(compact)
        self._kept_speakers.append(speakers)
        while self._kept[0].start < window.start - span:
            self._kept.popleft()
            self._kept_speakers.popleft()

    @property
    def kept_windows(self) -> list[WindowSpeakers]:
        """The windows kept for the closing relabel, oldest first."""
        return list(self._kept)

    @property
    def kept_spacing_s(self) -> float:
        """How far apart the kept windows start, on average: CLOSING_STEP_S, or more where
        steps skipped under load left a second without a window to keep."""
        if len(self._kept) < 2:
            return CLOSING_STEP_S
        return (self._kept[-1].start - self._kept[0].start) / (len(self._kept) - 1)

    @property
    def kept_speakers(self) -> list[tuple[int | None, ...]]:
        """Each kept window's local speakers' stream speakers (None: not linked)."""
        return list(self._kept_speakers)

    def relabel_due(self, now: float) -> bool:
        """Whether a checkpoint relabel is due at stream time ``now`` (and, if so, when
        the next one will be)."""
        every = self.config.relabel_every_s
        if every <= 0 or self.config.closing_s <= 0 or now > RELABEL_UNTIL_S:
            return False
        if len(self._kept) * CLOSING_STEP_S < CLOSING_MIN_S:
            return False
        if now < self._next_relabel:
            return False
        self._next_relabel = now + max(every, RELABEL_SHARE * now)
        return True

    def replay(
        self,
        audio: np.ndarray,
        phase_s: float = 0.0,
        on_heard: Heard | None = None,
        live_first: LiveFirst | None = None,
    ) -> int:
        """Step through a whole recording as the server does (the last ``window_s`` every
        ``step_s``, the first step ``phase_s`` early), then settle every label; returns
        the number of steps. ``on_heard`` is told the share of ``audio`` heard after each
        step; ``live_first`` is called before each."""
        steps = 0
        for window, start, now in self.windows(audio, phase_s):
            if live_first is not None:
                live_first()
            self.step(window, start, now)
            steps += 1
            if on_heard is not None:
                on_heard(now * SAMPLE_RATE / max(len(audio), 1))
        self.step(audio[:0], 0.0, len(audio) / SAMPLE_RATE, final=True)
        return steps + 1

    def as_recording(self) -> TimelineSnapshot:
        """The timeline as it stands, as a recording's: the speakers as shown, numbered by
        first appearance without the gaps that speakers founded and then merged leave."""
        live = self.timeline.snapshot(self.clustering.aliases())
        order = {k: i for i, k in enumerate(dict.fromkeys(t.speaker for t in live.turns))}
        turns = tuple(replace(t, speaker=order[t.speaker]) for t in live.turns)
        named = {order[s]: name for s, name in self.names().items() if s in order}
        live = TimelineSnapshot(turns, live.settled_until, len(order), (), live.heard_until)
        return replace(live, names=named)

    def windows(
        self, audio: np.ndarray, phase_s: float = 0.0
    ) -> Iterator[tuple[np.ndarray, float, float]]:
        """(window, its start, its end) of each step the server takes over ``audio``."""
        step = int(self.config.step_s * SAMPLE_RATE)
        window = int(self.config.window_s * SAMPLE_RATE)
        for end in range(step - int(phase_s * SAMPLE_RATE), len(audio) + 1, step):
            start = max(0, end - window)
            yield audio[start:end], start / SAMPLE_RATE, end / SAMPLE_RATE

    def segments(self, window: np.ndarray) -> bool:
        """Whether a step segments ``window`` (shorter ones only advance the timeline)."""
        return len(window) >= self.config.min_window_s * SAMPLE_RATE

    def observe(
        self,
        window: np.ndarray,
        window_start: float,
        activity: np.ndarray | None = None,
        thin: bool = False,
    ) -> WindowSpeakers:
        """The models' part of a step: the window's local speakers (segmentation, unless
        given, then embeddings from the frames each speaks alone; ``thin``: not of
        those carried over, whose rows are NaN)."""
        config, grid = self.config, self._models.grid
        if activity is None:
            activity = self._models.segment([window])[0]
        frames = SpeakerFrames.of(activity, config.active_probability)
        masks = frames.embedding_masks(grid, len(window), config.min_alone_s)
        window_end = window_start + len(window) / SAMPLE_RATE
        fresh_from = max(0, int((self._seen_until - window_start - grid.start) / grid.step))
        self._seen_until = max(self._seen_until, window_end)
        fresh_alone_s = frames.alone_seconds(grid, fresh_from)
        for s in self._carried(window_start + grid.start, activity, fresh_alone_s, thin):
            masks[s] = False  # linked as before: not embedded
        local = LocalSpeakers(
            self._models.embed(window, masks),
            activity.max(axis=0),
            frames.alone_seconds(grid),
            fresh_alone_s,
        )
        return WindowSpeakers(window_start + grid.start, activity, local)

    def _carried(
        self, start: float, activity: np.ndarray, fresh_alone_s: np.ndarray, thin: bool
    ) -> dict[int, int]:
        """The local speakers that keep the last window's link (``speaker_carry``): none in
        a step not thinned, nor in a window kept for the closing relabel, which clusters
        the embeddings of its own audio."""
        if not thin or self._keeps(start):
            return {}
        return carried(
            self._linked,
            start,
            activity > self.config.active_probability,
            fresh_alone_s,
            self._models.grid.step,
            self.config.busy_reembed_s,
        )

    def link(self, window: WindowSpeakers, thin: bool = False) -> None:
        """The numbers' part of a step: link the window's speakers to the stream's, add
        their activity to the timeline, and keep the window if the closing relabel is due
        one (``thin``: as ``observe`` was)."""
        local, previous = window.local, self._linked
        carry = self._carried(window.start, window.activity, local.fresh_alone_s, thin)
        unembedded = np.zeros(len(local.embeddings))
        held: dict[int, int] = {}  # carried local speaker → the global speaker it keeps
        if carry and previous is not None:  # a step not thinned copies nothing
            embeddings = local.embeddings.copy()
            for s, p in carry.items():
                embeddings[s] = previous.embeddings[p]
                unembedded[s] = previous.unembedded_s[p] + local.fresh_alone_s[s]
                if (speaker := previous.speakers[p]) is not None:  # always: carried if linked
                    held[s] = speaker
            local = replace(local, embeddings=embeddings)
        mapping = self.clustering.assign(local, held)
        self._linked = LinkedWindow(
            window.start,
            window.activity > self.config.active_probability,
            tuple(mapping),
            tuple(unembedded),
            local.embeddings,
        )
        activity = window.activity
        global_activity = np.zeros((len(activity), self.clustering.size))
        for s, g in enumerate(mapping):
            if g is not None:
                global_activity[:, g] = np.maximum(global_activity[:, g], activity[:, s])
        self.timeline.add_window(window.start, global_activity)
        self._keep(window, tuple(mapping))  # never a thinned one (_carried)
