"""Speaker labelling over the generated development set (bench/devset.py), in-process.

Each recording is stepped through one ``StreamDiarizer`` exactly as the server steps a
real-time stream (the last ``window_s`` every ``step_s``), with the bundled speaker
models, two recordings at a time (one per core, one torch thread each). Scored
against the known turns with pyannote.metrics (0.25 s collar, overlap scored):

- the distribution of DER over the split (median, p90) and per kind;
- the exact-count rate, and the over-count and merge (under-count) rates, per number
  of speakers;
- the seconds each step took (steps per second per core).

``--recording`` scores whole-recording clustering instead (a file upload's), and
``--closing`` what a client keeps once a stream has ended (its closing relabel, or the
live labels of a stream too short for one), and ``--held`` what it holds just before,
with the checkpoint relabels applied; ``--client`` what a client's finals say at the
end, through the session's own ``SpeakerTrack``. ``--cuts 2 2+1`` scores where and how soon
finals are cut at speaker changes instead, under each cut rule given (``cut_rule``),
and how soon the timeline first shows each change at all (what any rule waits for).
``--set thin=1`` thins every step, as a server behind on every step would
(``core/speaker_carry.py``).

The other modes score the speaker timeline itself (who spoke when, frame by frame),
which the finals' word labels are read from; ``--client`` scores those words (the
reference's speech in pieces, in finals cut where the server's own rule cuts them: the
labelling and the cuts, not the ASR), and ``bench/diarization.py`` the words a client
gets from a real server on a few recordings. Usage:
python bench/speakers.py [--split dev heldout] [--recording | --closing | --held |
--client | --cuts 2 2+1] [--set min_speaker_s=2 ...]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pickle
import statistics
import time
from dataclasses import replace
from pathlib import Path

from common import CHANGE_TOLERANCE_S, print_table, write_json

import numpy as np
from pyannote.core import Timeline

import recorded_voices
from devset import PLAN, SAMPLE_RATE, Recording, make
from parley.core.turns import TurnConfig
from parley.core.vad import VadConfig
from parley.recordings.files import FileLimits

COLLAR_S = 0.25
_MODELS = None


def _load(threads: int) -> None:
    global _MODELS
    import torch

    from parley.config import Settings
    from parley.models.speaker_models import load_speaker_models

    torch.set_num_threads(threads)
    _MODELS = load_speaker_models("bundle", Settings().models_dir, torch.device("cpu"))


# Fields of the diarization config itself that --set may override; every other key is
# a field of its ``clustering`` (or, with --recording and --closing, of the recording's),
# but for ``thin=1``: every step thinned, as a server behind on every step thins them.
STREAM_FIELDS = ("busy_reembed_s", "relabel_every_s", "closing_s", "latency_s")
# Fields of its ``turns`` that --set may override (confirm_latency_s=0: None).
TURN_FIELDS = ("change_latency_s", "confirm_latency_s", "min_turn_s", "max_cut_age_s")


def config_with(overrides: dict[str, str]):
    """The server's default diarization config, with ``clustering`` fields (and
    STREAM_FIELDS) overridden."""
    from parley.config import DiarizationSettings

    config = DiarizationSettings().to_config()
    clustering = config.clustering
    for key, value in overrides.items():
        if key in STREAM_FIELDS:
            config = replace(config, **{key: type(getattr(config, key))(value)})
            continue
        if key in TURN_FIELDS:  # the turn settings: where finals are cut, how words join
            number = float(value)  # confirm_latency_s=0: no confirmed cuts (None)
            unset = key in ("confirm_latency_s", "max_cut_age_s") and number == 0
            config = replace(
                config, turns=replace(config.turns, **{key: None if unset else number})
            )
            continue
        kind = type(getattr(clustering, key))
        clustering = replace(clustering, **{key: kind(value)})
    return replace(config, clustering=clustering)


LIVE_STEP_S = config_with({}).step_s  # the cached windows' step: the server's live step
# A recording's windows are FileLimits.diarization_step_s apart: one cached window in so many.
RECORDING_STRIDE = round(FileLimits().diarization_step_s / LIVE_STEP_S)
OBSERVATIONS = Path(__file__).resolve().parent / "results" / "speaker-observations"


def _observe(job: tuple[str, str, int, int]) -> Path:
    """The models' part of every step of one recording, cached: the clustering under test
    is the only thing that changes between runs, and it is pure numpy."""
    from parley.core.stream_diarizer import StreamDiarizer

    recording: Recording = make(*job)
    path = OBSERVATIONS / f"{recording.name}.pkl"
    if path.exists():
        return path
    diarizer = StreamDiarizer(_MODELS, config_with({}))
    windows, began = [], time.perf_counter()
    for window, start, _ in diarizer.windows(recording.audio):
        if len(window) >= diarizer.config.min_window_s * SAMPLE_RATE:
            windows.append(diarizer.observe(window, start))
    spent = time.perf_counter() - began
    OBSERVATIONS.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps({"windows": windows, "seconds": spent}))
    return path


def _label_settled(diarizer, shown: dict) -> None:
    """Label each newly settled turn with the speaker it is shown as now: what a client
    keeps (a settled final's labels never change), not what later merges would say."""
    aliases = diarizer.clustering.aliases()
    for turn in diarizer.timeline.settled_turns():
        key = (turn.start, turn.end, turn.speaker)
        if key not in shown:
            shown[key] = aliases[turn.speaker] if turn.speaker < len(aliases) else turn.speaker


def _scored(
    recording: Recording,
    turns: list[tuple[float, float, int]],
    job: tuple,
    steps: int,
    step_s: float,
    windows: list,
) -> dict:
    """One recording's row: ``turns`` (start, end, speaker) against its known turns;
    ``windows``: its cached windows, to say how alike its closest voices are."""
    from pyannote.core import Annotation, Segment
    from pyannote.metrics.diarization import DiarizationErrorRate

    split, kind, speakers = job[:3]
    hypothesis, reference = Annotation(), Annotation()
    for k, (start, end, speaker) in enumerate(turns):
        hypothesis[Segment(start, end), k] = speaker
    for k, turn in enumerate(recording.turns):
        reference[Segment(turn.start, turn.end), k] = turn.speaker
    parts = DiarizationErrorRate(collar=COLLAR_S, skip_overlap=False)(
        reference, hypothesis, detailed=True, uem=Timeline([Segment(0, recording.duration)])
    )
    return {
        "recording": recording.name,
        "closest_voices": closest_voices(recording, windows, _MODELS.grid.step),
        "split": split,
        "kind": kind,
        "speakers": speakers,
        "found": len(hypothesis.labels()),
        "der": parts["diarization error rate"],
        "confusion": parts["confusion"] / max(parts["total"], 1e-9),
        "duration_s": recording.duration,
        "steps": steps,
        "step_s": step_s,
    }


# Two voices whose windows' centroids are at least this alike are closer to each other
# than a voice's own windows are to their centroid (0.92 on average over the set): the
# embedding hardly tells them apart, whatever the linking does.
ALIKE = 0.90
MIN_ALONE_S = 1.0  # a local speaker heard alone this long in its window is one voice


def closest_voices(recording: Recording, windows: list, frame_step: float) -> float | None:
    """How alike the two most alike true voices of ``recording`` are: the cosine between
    the centroids of their windows' embeddings (each local speaker heard alone for
    MIN_ALONE_S, given the voice the reference says spoke in its alone frames). None
    for one voice. This describes the set (it reads the reference); nothing tunes on it."""
    names = sorted({t.speaker for t in recording.turns})
    by_voice: dict[int, list[np.ndarray]] = {}
    for window in windows:
        local, active = window.local, window.activity > 0.5
        for s in range(len(local.alone_s)):
            vector = local.embeddings[s]
            if local.alone_s[s] < MIN_ALONE_S or np.isnan(vector).any():
                continue
            alone = active[:, s] & (active.sum(axis=1) == 1)
            votes = np.zeros(len(names))
            for t in window.start + np.flatnonzero(alone) * frame_step:
                for turn in recording.turns:
                    if turn.start <= t < turn.end:
                        votes[names.index(turn.speaker)] += 1
            if votes.any():
                by_voice.setdefault(int(votes.argmax()), []).append(vector / np.linalg.norm(vector))
    centroids = [np.mean(v, axis=0) for v in by_voice.values() if len(v) >= 3]
    if len(centroids) < 2:
        return None
    unit = np.array([c / np.linalg.norm(c) for c in centroids])
    alike = unit @ unit.T
    np.fill_diagonal(alike, -1.0)
    return float(alike.max())


def _score(job: tuple[str, str, int, int, dict], as_ended: bool = False) -> dict:
    """The live labels: each turn with the label it had when it settled (``as_ended``:
    the timeline as it stands at the end, every merge applied, as a stream too short for
    the closing clustering ends relabelled)."""
    from parley.core.stream_diarizer import StreamDiarizer

    split, kind, speakers, index, overrides = job
    overrides = dict(overrides)
    thin = overrides.pop("thin", "0") == "1"
    recording: Recording = make(split, kind, speakers, index)
    cached = pickle.loads((OBSERVATIONS / f"{recording.name}.pkl").read_bytes())
    diarizer = StreamDiarizer(_MODELS, config_with(overrides))
    began = time.perf_counter()
    windows = iter(cached["windows"])
    shown: dict[tuple[float, float, int], int] = {}  # settled turn → speaker shown then
    for window, _, now in diarizer.windows(recording.audio):
        if len(window) >= diarizer.config.min_window_s * SAMPLE_RATE:
            diarizer.link(next(windows), thin)
        diarizer.timeline.advance(now)
        _label_settled(diarizer, shown)
    diarizer.timeline.advance(recording.duration, final=True)
    _label_settled(diarizer, shown)
    linking = time.perf_counter() - began
    steps = len(cached["windows"])
    turns = [(start, end, speaker) for (start, end, _), speaker in sorted(shown.items())]
    if as_ended:
        turns = [(t.start, t.end, t.speaker) for t in diarizer.as_recording().turns]
    seconds = (cached["seconds"] + linking) / max(steps, 1)
    return _scored(recording, turns, job, steps, seconds, cached["windows"])


def _score_recording(job: tuple[str, str, int, int, dict], windows: list | None = None) -> dict:
    """What a file upload gets: whole-recording clustering over the cached windows, one in
    every ``RECORDING_STRIDE`` (the file pipeline's step), or the live linking over every
    window where the server links it live (``diarized_live``: too short to cluster);
    ``windows``: cluster these instead, whatever the length. ``overrides``: fields of
    ``RecordingClustering``, ``stride=N`` (``neighbours`` scaled to it, as the server
    scales them, unless given), ``oracle_count=1`` to give the true number of speakers,
    ``cut_s=L`` to take each recording's first L seconds only, and ``clustered=1`` to
    cluster however short (the server before it linked short ones live)."""
    from parley.core.recording_speakers import RecordingClustering, SpeakerCount, diarize_windows
    from parley.core.stream_diarizer import StreamDiarizer
    from parley.core.whole_recording import diarized_live

    split, kind, speakers, index, overrides = job
    overrides = dict(overrides)
    oracle = overrides.pop("oracle_count", "") == "1"
    stride = int(overrides.pop("stride", RECORDING_STRIDE))
    step_s = float(overrides.pop("step_s", stride * LIVE_STEP_S))  # between the windows
    cut_s = float(overrides.pop("cut_s", "inf"))
    clustered = overrides.pop("clustered", "") == "1"
    recording: Recording = make(split, kind, speakers, index)
    cached = pickle.loads((OBSERVATIONS / f"{recording.name}.pkl").read_bytes())
    if cut_s < recording.duration:  # the recording's first cut_s, and the windows over it
        recording, speakers = _cut(recording, cut_s)
        cached["windows"] = cached["windows"][: int(cut_s / LIVE_STEP_S)]  # each ends 0.5 s on
        job = (split, kind, speakers, index, job[4])
    count = SpeakerCount(exactly=speakers) if oracle else SpeakerCount()
    live = config_with({})
    if (
        windows is None
        and not clustered
        and diarized_live(recording.duration, live.window_s, count)
    ):
        # As the server diarizes it: the live linking over every window, every label settled.
        diarizer = StreamDiarizer(_MODELS, live.for_count(count))
        for k, window in enumerate(cached["windows"]):
            diarizer.link(window)
            diarizer.timeline.advance((k + 1) * LIVE_STEP_S)
        diarizer.timeline.advance(recording.duration, final=True)
        turns = [(t.start, t.end, t.speaker) for t in diarizer.as_recording().turns]
        return _scored(recording, turns, job, len(cached["windows"]), 0.0, cached["windows"])
    windows = cached["windows"] if windows is None else windows
    defaults = RecordingClustering()
    config = RecordingClustering(**{k: type(getattr(defaults, k))(v) for k, v in overrides.items()})
    if "neighbours" not in overrides:
        config = config.for_step(step_s)
    snapshot = diarize_windows(windows[::stride], _MODELS.grid.step, config, count)
    turns = [(t.start, t.end, t.speaker) for t in snapshot.turns]
    return _scored(
        recording,
        turns,
        job,
        len(cached["windows"]) // stride,
        cached["seconds"] / max(len(cached["windows"]), 1),
        cached["windows"],
    )


def _cut(recording: Recording, cut_s: float) -> tuple[Recording, int]:
    """The first ``cut_s`` of ``recording`` (the turns that start in it, ended at the cut),
    and how many people speak in it."""
    turns = [replace(t, end=min(t.end, cut_s)) for t in recording.turns if t.start < cut_s]
    cut = replace(recording, audio=recording.audio[: int(cut_s * SAMPLE_RATE)], turns=turns)
    return cut, len({t.speaker for t in turns})


def _score_closing(job: tuple[str, str, int, int, dict]) -> dict:
    """What a client keeps once a stream has ended: the closing relabel's timeline (the
    windows a stream keeps, one every ``CLOSING_STEP_S``, clustered at once), or, where the
    stream was too short for that, its live timeline as it ended."""
    from parley.core.stream_diarizer import CLOSING_MIN_S, CLOSING_STEP_S, StreamDiarizer

    split, kind, speakers, index, overrides = job
    recording: Recording = make(split, kind, speakers, index)
    cached = pickle.loads((OBSERVATIONS / f"{recording.name}.pkl").read_bytes())
    overrides = {"stride": str(round(CLOSING_STEP_S / LIVE_STEP_S)), **overrides}
    stride = int(overrides["stride"])
    live = {k: overrides.pop(k) for k in (*STREAM_FIELDS, "thin") if k in overrides}
    if len(cached["windows"][::stride]) * stride * LIVE_STEP_S >= CLOSING_MIN_S:
        if stride != round(CLOSING_STEP_S / LIVE_STEP_S):
            return _score_recording((split, kind, speakers, index, overrides))
        # The windows the live linking keeps for the relabel, as a server keeps them.
        thin = live.pop("thin", "0") == "1"
        diarizer = StreamDiarizer(_MODELS, config_with(live))
        for window in cached["windows"]:
            diarizer.link(window, thin)
        kept = diarizer.kept_windows
        overrides = {**overrides, "stride": "1", "step_s": str(CLOSING_STEP_S)}
        return _score_recording((split, kind, speakers, index, overrides), kept)
    # Too short: the live timeline (the overrides are the closing clustering's, not its).
    if overrides.get("oracle_count") == "1":  # the count given caps the live linking
        live = {"max_speakers": str(speakers), **live}
    return _score((split, kind, speakers, index, live), as_ended=True)


def _score_held(job: tuple[str, str, int, int, dict]) -> dict:
    """What a client holds just before its stream ends, before the closing relabel: the
    turns settled by the last checkpoint relabel (``relabel_due``) as that relabel
    clustered them, and the ones settled after it with their live labels, a live speaker
    that took a clustered one over (``taken_over``) named as it."""
    from parley.core.speaker_relabel import relabel
    from parley.core.stream_diarizer import StreamDiarizer

    split, kind, speakers, index, overrides = job
    recording: Recording = make(split, kind, speakers, index)
    cached = pickle.loads((OBSERVATIONS / f"{recording.name}.pkl").read_bytes())
    diarizer = StreamDiarizer(_MODELS, config_with(overrides))
    windows = iter(cached["windows"])
    shown: dict[tuple[float, float, int], int] = {}
    last = None  # (settled until then, the relabel)
    for window, _, now in diarizer.windows(recording.audio):
        if len(window) >= diarizer.config.min_window_s * SAMPLE_RATE:
            diarizer.link(next(windows))
        diarizer.timeline.advance(now)
        _label_settled(diarizer, shown)
        if diarizer.relabel_due(now) and (found := relabel(diarizer)) is not None:
            last = (diarizer.timeline.snapshot().settled_until, found)
    diarizer.timeline.advance(recording.duration, final=True)
    _label_settled(diarizer, shown)
    turns = [(start, end, speaker) for (start, end, _), speaker in sorted(shown.items())]
    if last is not None:
        until, found = last
        own = 1 + max((t.speaker for t in found.timeline.turns), default=0)  # none taken
        relabelled = [(t.start, min(t.end, until), t.speaker) for t in found.timeline.turns]
        later = [
            (max(start, until), end, found.taken_over.get(speaker, own + speaker))
            for start, end, speaker in turns
            if end > until
        ]
        turns = [t for t in relabelled if t[0] < until] + later
    return _scored(recording, turns, job, len(cached["windows"]), 0.0, cached["windows"])


# --client: the reference's speech in pieces this long stands for a final's words, and a
# final is labelled this long after it is cut (about its decode).
WORD_S = 0.3
DECODED_AFTER_S = 0.5
CUT_AFTER_S = 2.0  # --set cuts=true: a true change is cut this long after it
VAD_PAD_S = VadConfig().speech_pad_ms / 1000  # a final ends this far past its speech


def _speech_words(speech: list[tuple[float, float]], start: float, end: float) -> list:
    """The reference's speech in [start, end] in WORD_S pieces, as a final's words."""
    from parley.protocol.messages import Word

    words: list[Word] = []
    for s0, s1 in speech:
        t, hi = max(start, s0), min(end, s1)
        while t < hi - 1e-6:
            if not words or t >= words[-1].end - 1e-6:
                words.append(Word("w", t, min(t + WORD_S, hi), 0.9))
            t += WORD_S
    return words


def _score_client(job: tuple[str, str, int, int, dict]) -> dict:
    """What a client's transcript says once its stream has ended, through the session's
    own ``SpeakerTrack``. Its finals are the VAD's segments (``speech_regions``), cut
    where the server's own rule (``ChangeCuts``, read after every step) cuts them
    (``--set cuts=true``: at the true changes, 2 s late), their words the reference's
    speech in WORD_S pieces; each is labelled when it would be sent, every step's
    snapshot applied as the server applies it (checkpoint relabels at ``relabel_due``,
    the closing relabel at the end), and every ``speaker_update`` applied to the finals
    kept; the words' speakers then scored. The labelling the timeline modes leave out
    (words smoothed into turns, label numbers, finals settled or not) is in; the ASR is
    not."""
    from parley.core.speaker_relabel import closing_timeline, relabel
    from parley.core.stream_diarizer import StreamDiarizer
    from parley.core.turns import ChangeCuts
    from parley.protocol.messages import Final, FinalReason
    from parley.sessions.speaker_track import SpeakerTrack
    from parley.workers.diarization import DiarizationWorker

    split, kind, speakers, index, overrides = job
    overrides = dict(overrides)
    held = overrides.pop("held", "0") == "1"  # what the client held before the closing
    true_cuts = overrides.pop("cuts", "server") == "true"
    recording: Recording = make(split, kind, speakers, index)
    cached = pickle.loads((OBSERVATIONS / f"{recording.name}.pkl").read_bytes())
    config = config_with(overrides)
    diarizer = StreamDiarizer(_MODELS, config)
    track = SpeakerTrack(DiarizationWorker(_MODELS, config))  # its threads never start
    rule = ChangeCuts(config.turns)
    speech = sorted((t.start, t.end) for t in recording.turns)
    regions = speech_regions(recording)
    changes = inner_changes(recording)
    pending: list[tuple[float, Final]] = []  # (stream time it is sent at, final)
    kept: dict[int, Final] = {}
    opened = [0, regions[0][0] if regions else 0.0]  # the open region, its open start
    windows = iter(cached["windows"])

    def cut(end: float, final_end: float, at: float, reason: FinalReason) -> None:
        words = _speech_words(speech, opened[1], end)
        if words:
            made = len(pending) + len(kept)
            pending.append((at, Final(made, opened[1], final_end, "", reason, words)))
        opened[1] = end

    def segment(now: float, snapshot) -> None:
        """The finals the VAD and the cut rule close by stream time ``now``."""
        while opened[0] < len(regions) and now >= regions[opened[0]][1] + VAD_SILENCE_S:
            end = regions[opened[0]][1]
            final_end = min(end + VAD_PAD_S, recording.duration)
            cut(end, final_end, now + DECODED_AFTER_S, FinalReason.SILENCE)
            opened[0] += 1
            if opened[0] < len(regions):
                opened[1] = regions[opened[0]][0]
        if opened[0] >= len(regions) or regions[opened[0]][0] >= now:
            return
        end = min(now, regions[opened[0]][1])
        if true_cuts:
            for change in [c for c in changes if opened[1] < c <= now - CUT_AFTER_S]:
                cut(change, change, now + DECODED_AFTER_S, FinalReason.SPEAKER_CHANGE)
            return
        while (at := rule.read(snapshot.by_voice(), opened[1], end)) is not None:
            if at <= opened[1]:
                break
            cut(at, at, now + DECODED_AFTER_S, FinalReason.SPEAKER_CHANGE)

    def applied(snapshot) -> None:
        for update in track.apply(snapshot):
            sent = kept[update.segment_id]
            kept[update.segment_id] = replace(sent, speaker=update.speaker, words=update.words)

    def send(until: float) -> None:
        pending.sort(key=lambda item: item[0])
        while pending and pending[0][0] <= until:
            final = pending.pop(0)[1]
            kept[final.segment_id] = track.label_final(final)

    for window, _, now in diarizer.windows(recording.audio):
        if len(window) >= diarizer.config.min_window_s * SAMPLE_RATE:
            diarizer.link(next(windows))
        diarizer.timeline.advance(now)
        snapshot = diarizer.timeline.snapshot(
            diarizer.clustering.aliases(), diarizer.clustering.voices()
        )
        if diarizer.relabel_due(now) and (found := relabel(diarizer)) is not None:
            snapshot = replace(snapshot, closing=found.timeline, taken_over=found.taken_over)
        applied(snapshot)
        send(now)
        segment(now, snapshot)
    if opened[0] < len(regions):  # the end of the stream closes the open segment
        cut(
            regions[opened[0]][1], recording.duration, recording.duration, FinalReason.END_OF_STREAM
        )
    send(float("inf"))  # the stream's last finals come before its last step's labels
    diarizer.timeline.advance(recording.duration, final=True)
    snapshot = diarizer.timeline.snapshot(
        diarizer.clustering.aliases(), diarizer.clustering.voices()
    )
    if not held and diarizer.config.closing_s > 0:
        snapshot = replace(snapshot, closing=closing_timeline(diarizer), taken_over=None)
    applied(snapshot)
    turns = [
        (w.start, w.end, int(w.speaker[1:]))
        for final in kept.values()
        for w in final.words
        if w.speaker is not None
    ]
    row = _scored(recording, turns, job, len(cached["windows"]), 0.0, cached["windows"])
    row["finals"] = len(kept)
    row["change_cuts"] = sum(f.reason == FinalReason.SPEAKER_CHANGE for f in kept.values())
    return row


# A pause this long ends the VAD's segment: no change cut is needed there.
VAD_SILENCE_S = VadConfig().min_silence_ms / 1000


def speech_regions(recording: Recording) -> list[tuple[float, float]]:
    """The stretches the VAD keeps in one segment: the known turns, joined across pauses
    shorter than VAD_SILENCE_S (overlaps included)."""
    regions: list[list[float]] = []
    for turn in sorted(recording.turns, key=lambda t: t.start):
        if regions and turn.start - regions[-1][1] < VAD_SILENCE_S:
            regions[-1][1] = max(regions[-1][1], turn.end)
        else:
            regions.append([turn.start, turn.end])
    return [(a, b) for a, b in regions]


def inner_changes(recording: Recording) -> list[float]:
    """Where the speaker changes inside a region (no pause for the VAD to end a segment
    at): midway between one turn's end and the next's start, their speakers differing."""
    turns = sorted(recording.turns, key=lambda t: t.start)
    return [
        (a.end + b.start) / 2
        for a, b in zip(turns, turns[1:])
        if a.speaker != b.speaker and b.start - a.end < VAD_SILENCE_S
    ]


def _score_cuts(job: tuple[str, str, int, int, dict]) -> dict:
    """Where and when the server would cut finals at speaker changes: the recording
    stepped as ``_score`` steps it, and after each step a ``ChangeCuts`` read over the
    open segment (as ``SpeakerTrack.turn_change`` reads it), one per rule in
    ``overrides["rules"]`` (``cut_rule``); with ``overrides["stride"]`` N, only every Nth
    step runs, as on a server too busy to step in time. The segments are the known speech joined
    across pauses shorter than the VAD's; the time a cut takes to decode is left out."""
    from parley.core.stream_diarizer import StreamDiarizer
    from parley.core.turns import ChangeCuts

    split, kind, speakers, index, overrides = job
    names = overrides["rules"].split(",")
    recording: Recording = make(split, kind, speakers, index)
    cached = pickle.loads((OBSERVATIONS / f"{recording.name}.pkl").read_bytes())
    diarizer = StreamDiarizer(_MODELS, config_with({}))
    rules = {name: ChangeCuts(cut_rule(diarizer.config.turns, name)) for name in names}
    regions = speech_regions(recording)
    changes = inner_changes(recording)
    opened: dict[str, tuple[int, float]] = {}  # rule → (region, open segment's start)
    cuts: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    windows = iter(cached["windows"])
    stride = int(overrides.get("stride", 1))
    seen: dict[float, float] = {}  # true change → when the timeline first showed it
    for step, (window, _, now) in enumerate(diarizer.windows(recording.audio)):
        if len(window) < diarizer.config.min_window_s * SAMPLE_RATE:
            continue
        observed = next(windows)
        if step % stride:
            continue  # a busy server's skipped step: the next window covers its audio
        diarizer.link(observed)
        diarizer.timeline.advance(now)
        voices = diarizer.timeline.snapshot(
            diarizer.clustering.aliases(), diarizer.clustering.voices()
        ).by_voice()
        for change in changes:
            if change not in seen and _shows(voices, change, now):
                seen[change] = now - change
        live = [k for k, (a, b) in enumerate(regions) if a < now <= b + VAD_SILENCE_S]
        if not live:
            continue
        region = live[-1]
        for name, rule in rules.items():
            if opened.get(name, (-1, 0.0))[0] != region:
                opened[name] = (region, regions[region][0])
            start = opened[name][1]
            end = min(now, regions[region][1])
            while (cut := rule.read(voices, start, end)) is not None and cut > start:
                cuts[name].append((cut, now))
                start = cut
            opened[name] = (region, start)
    row = {"recording": recording.name, "split": split, "kind": kind, "speakers": speakers}
    row["changes"] = len(changes)
    row["seen"] = list(seen.values())
    for name, made in cuts.items():
        near = [
            (cut, now, min(changes, key=lambda t: abs(t - cut)))
            for cut, now in made
            if changes and min(abs(t - cut) for t in changes) <= CHANGE_TOLERANCE_S
        ]
        row[f"cuts@{name}"] = len(made)
        row[f"right@{name}"] = len(near)
        row[f"found@{name}"] = len({true for *_, true in near})
        row[f"delays@{name}"] = [now - true for _, now, true in near]
    return row


# Either side of a true change, the stretch the timeline must give two different voices
# for the change to count as shown (by voice: a newcomer not yet confirmed counts).
SHOWN_SPAN = (0.1, 0.6)


def _shows(voices, change: float, now: float) -> bool:
    """Whether the by-voice timeline, having heard up to ``now``, gives the stretch just
    before ``change`` and the one just after it to two different voices."""
    near, far = SHOWN_SPAN
    if now < change + near + 0.1:
        return False
    before = voices.speaking(change - far, change - near)
    after = voices.speaking(change + near, min(change + far, now))
    return before is not None and after is not None and before != after


def cut_rule(turns: TurnConfig, rule: str) -> TurnConfig:
    """``"2"``: a change cuts once 2 s old; ``"2+1"``: also once 1 s old if the step
    before read it at the same place; ``"2+1<2.5"``: the same, but no change found more
    than 2.5 s after it."""
    rule, _, oldest = rule.partition("<")
    latency, _, confirm = rule.partition("+")
    return replace(
        turns,
        change_latency_s=float(latency),
        confirm_latency_s=float(confirm) if confirm else None,
        max_cut_age_s=float(oldest) if oldest else None,
    )


def summarise_cuts(rows: list[dict], group: str, rules: list[str]) -> list[dict]:
    """Per change rule: the share of cuts that are right, the share of inner changes
    cut, and how long after the true change a right cut was made (median, p90, max)."""
    out = []
    changes = sum(r["changes"] for r in rows)
    seen = sorted(d for r in rows for d in r["seen"])
    for rule in rules:
        made = sum(r[f"cuts@{rule}"] for r in rows)
        delays = sorted(d for r in rows for d in r[f"delays@{rule}"])
        out.append(
            {
                "group": group,
                "cut_rule": rule,
                "inner_changes": changes,
                "cuts": made,
                "right": sum(r[f"right@{rule}"] for r in rows) / max(made, 1),
                "changes_cut": sum(r[f"found@{rule}"] for r in rows) / max(changes, 1),
                "delay_median": statistics.median(delays) if delays else None,
                "delay_p90": float(np.percentile(delays, 90)) if delays else None,
                "delay_max": delays[-1] if delays else None,
                "shown": len(seen) / max(changes, 1),
                "shown_median": statistics.median(seen) if seen else None,
                "shown_p90": float(np.percentile(seen, 90)) if seen else None,
            }
        )
    return out


def report_cuts(rows: list[dict], splits: list[str], rules: list[str], label: str) -> None:
    summary = []
    for split in splits:
        mine = [r for r in rows if r["split"] == split]
        summary += summarise_cuts(mine, f"{split}: all", rules)
        for kind in sorted({r["kind"] for r in mine}):
            group = [r for r in mine if r["kind"] == kind]
            summary += summarise_cuts(group, f"{split}: {kind}", rules)
    print_table(
        summary,
        [
            "group",
            "cut_rule",
            "inner_changes",
            "cuts",
            "right",
            "changes_cut",
            "delay_median",
            "delay_p90",
            "delay_max",
            "shown",
            "shown_median",
            "shown_p90",
        ],
    )
    print(f"wrote {write_json('speaker-cuts', {'label': label, 'summary': summary, 'rows': rows})}")


# (name, threads, segmentation batch, every step thinned as after a skipped one): one
# step at a time on one thread (the server before), then each change added in turn.
SPEED_VARIANTS = (
    ("one thread, one step at a time", 1, 1, False),
    ("+ due steps segmented together (up to 4)", 1, 4, False),
    ("+ two threads", 2, 4, False),
    ("+ every step thinned", 2, 4, True),
)


def speed(jobs: list[tuple], label: str) -> list[dict]:
    """Steps per second: the first 40 s of each recording, all streamed at once (as
    concurrent sessions are) through the server's own diarization worker, under each of
    SPEED_VARIANTS in turn; per core: divided by the threads used."""
    import asyncio

    import parley
    from parley.config import DiarizationSettings
    from parley.models.device import set_threads
    from parley.workers.diarization import DiarizationWorker

    _load(1)
    audios = [make(*job[:4]).audio[: 40 * SAMPLE_RATE] for job in jobs]
    counter = _EmbeddingCounter(_MODELS)

    async def run(threads: int, batch: int, thin: bool) -> dict:
        config = DiarizationSettings().to_config()
        worker = DiarizationWorker(
            counter,
            config,
            threads=threads,
            max_batch=batch,
            on_thread_start=lambda: set_threads(1),
        )
        worker.start()

        async def session(audio: np.ndarray) -> None:
            diarizer = worker.new_stream()
            for window, start, now in diarizer.windows(audio):
                step = await worker.submit(diarizer, window, start, now, thin=thin)
                await asyncio.wrap_future(step)

        counter.embedded = 0
        began = time.perf_counter()
        await asyncio.gather(*(session(audio) for audio in audios))
        spent = time.perf_counter() - began
        await worker.stop()
        steps = worker.stats.steps
        return {"steps": steps, "seconds": spent, "embeddings_per_step": counter.embedded / steps}

    rows = []
    for name, threads, batch, thin in SPEED_VARIANTS:
        measured = asyncio.run(run(threads, batch, thin))
        per_second = measured["steps"] / measured["seconds"]
        rows.append(
            {
                "code": label or parley.__file__,
                "variant": name,
                "sessions": len(jobs),
                "threads": threads,
                **measured,
                "steps_per_second": per_second,
                "steps_per_second_per_core": per_second / threads,
                "vs_first": per_second / (rows[0]["steps_per_second"] if rows else per_second),
            }
        )
    return rows


class _EmbeddingCounter:
    """The speaker models, counting the embeddings they compute."""

    def __init__(self, models):
        self._models = models
        self.grid = models.grid
        self.embedded = 0

    def segment(self, windows):
        return self._models.segment(windows)

    def embed(self, window, masks):
        self.embedded += int((masks.sum(axis=1) >= 0.3 * SAMPLE_RATE).sum())
        return self._models.embed(window, masks)


def summarise(rows: list[dict], group: str) -> dict:
    ders = [r["der"] for r in rows]
    return {
        "group": group,
        "recordings": len(rows),
        "exact_count": statistics.fmean(r["found"] == r["speakers"] for r in rows),
        "over_count": statistics.fmean(r["found"] > r["speakers"] for r in rows),
        "merged": statistics.fmean(r["found"] < r["speakers"] for r in rows),
        "der_median": statistics.median(ders),
        "der_p90": float(np.percentile(ders, 90)),
        "der_mean": statistics.fmean(ders),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--split", nargs="+", choices=sorted(PLAN), default=["dev"])
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="FIELD=VALUE",
        help="override a ClusteringConfig field",
    )
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--only", help="recordings whose name contains this")
    parser.add_argument("--label", default="")
    parser.add_argument(
        "--recording",
        action="store_true",
        help="score whole-recording clustering (file uploads), not the "
        "live linking; --set takes RecordingClustering fields, "
        "oracle_count=1 (the true count given) and stride=N",
    )
    parser.add_argument(
        "--closing",
        action="store_true",
        help="score what a client keeps after a stream's closing relabel (--set "
        "oracle_count=1: the client gave the true num_speakers)",
    )
    parser.add_argument(
        "--client",
        action="store_true",
        help="score what a client's finals say once its stream has ended, through the "
        "session's own SpeakerTrack (every speaker_update applied; --set held=1: before "
        "the closing relabel)",
    )
    parser.add_argument(
        "--held",
        action="store_true",
        help="score what a client holds just before its stream ends: its checkpoint "
        "relabels applied, not yet the closing one (--set relabel_every_s=N)",
    )
    parser.add_argument(
        "--cuts",
        nargs="+",
        metavar="RULE",
        help="score the finals' speaker-change cuts (where, how soon) under each of these "
        "rules, not the labels: 2 (a change cuts once 2 s old), 2+1 (also once 1 s old "
        "if two steps in a row read it at the same place); --set stride=N: every Nth "
        "step only, as a busy server steps",
    )
    parser.add_argument(
        "--speed",
        type=int,
        metavar="N",
        help="only measure steps per second, N recordings streamed at once through "
        "the server's diarization worker, under each variant in turn",
    )
    args = parser.parse_args()
    overrides = dict(item.split("=", 1) for item in args.set)
    jobs = [
        (split, kind, speakers, i, overrides)
        for split in args.split
        for (kind, speakers), count in PLAN[split].items()
        for i in range(count)
    ]
    if args.only:
        jobs = [j for j in jobs if args.only in f"{j[0]}-{j[1].replace(' ', '_')}-{j[2]}-{j[3]}"]
    missing = {split for split in args.split if not recorded_voices.available(split)}
    if missing:
        print(f"no recorded voices installed for {sorted(missing)}: their recordings are left")
        print("out (bench/recorded_voices.py names the Debian packages)")
        jobs = [j for j in jobs if not (j[1] == "recorded" and j[0] in missing)]
    if args.speed:
        rows = speed(jobs[:: max(1, len(jobs) // args.speed)][: args.speed], args.label)
        print_table(
            rows,
            [
                "variant",
                "sessions",
                "threads",
                "embeddings_per_step",
                "steps_per_second",
                "steps_per_second_per_core",
                "vs_first",
            ],
        )
        print(f"wrote {write_json('speakers-speed', {'variants': rows})}")
        return
    for job in jobs:  # generate (and cache) the speech once, before the workers need it
        make(*job[:4])
    with multiprocessing.get_context("fork").Pool(args.workers, _load, (1,)) as pool:
        pool.map(_observe, [job[:4] for job in jobs], chunksize=1)
        if args.cuts:
            rules = ",".join(args.cuts)
            jobs = [(*job[:4], {**job[4], "rules": rules}) for job in jobs]
            cut_rows = pool.map(_score_cuts, jobs, chunksize=1)
        else:
            scoring = (
                _score_client
                if args.client
                else _score_closing
                if args.closing
                else _score_held
                if args.held
                else _score_recording
                if args.recording
                else _score
            )
            rows = pool.map(scoring, jobs, chunksize=1)
    if args.cuts:
        report_cuts(cut_rows, args.split, args.cuts, args.label)
        return
    print_table(
        rows,
        ["recording", "speakers", "found", "der", "confusion", "closest_voices", "step_s"],
    )
    summary = []
    for split in args.split:
        mine = [r for r in rows if r["split"] == split]
        summary.append(summarise(mine, f"{split}: all"))
        for speakers in sorted({r["speakers"] for r in mine}):
            summary.append(
                summarise(
                    [r for r in mine if r["speakers"] == speakers], f"{split}: {speakers} speakers"
                )
            )
        for kind in sorted({r["kind"] for r in mine}):
            summary.append(summarise([r for r in mine if r["kind"] == kind], f"{split}: {kind}"))
        voices = [r for r in mine if r.get("closest_voices") is not None]
        for name, group in (
            (f"two voices ≥ {ALIKE} alike", [r for r in voices if r["closest_voices"] >= ALIKE]),
            (f"all voices < {ALIKE} alike", [r for r in voices if r["closest_voices"] < ALIKE]),
        ):
            if group:
                summary.append(summarise(group, f"{split}: {name}"))
    print()
    print_table(
        summary,
        [
            "group",
            "recordings",
            "exact_count",
            "over_count",
            "merged",
            "der_median",
            "der_p90",
            "der_mean",
        ],
    )
    step_s = statistics.fmean(r["step_s"] for r in rows)
    per_core = 1 / step_s if step_s > 0 else None  # modes that replay cached steps time none
    if per_core is not None:
        print(f"\nmean step {step_s * 1000:.1f} ms: {per_core:.1f} steps per second per core")
    path = write_json(
        "speakers",
        {
            "label": args.label,
            "overrides": overrides,
            "steps_per_second_per_core": per_core,
            "summary": summary,
            "rows": rows,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
