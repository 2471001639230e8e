"""A stream's speakers clustered at once from the windows it kept (pure).

The live linking labels a voice when it is first heard, with only the past to compare
with (``speakers.OnlineClustering``). The windows a stream keeps (one a second) can be
clustered at once, as a recording's are (``recording_speakers``): at the stream's end
(the closing relabel, which relabels every final) and at checkpoints before it
(``StreamDiarizer.relabel_due``), which relabel the finals already settled. A stream
too short to cluster ends relabelled from its own live timeline as it stands
(``closing_timeline``). After a
checkpoint, the live speakers keep the labels the clustering gave their voices: each
clustered speaker is taken over by one live speaker, of those whose windows went mostly
to it the one that held the most of them, and the other live speakers keep labels of
their own, so that a live speaker the clustering had joined to another is still told
apart in the finals to come.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from parley.core.recording_speakers import (
    RecordingClustering,
    WindowSpeakerMap,
    cluster_windows,
    timeline_of,
)
from parley.core.speaker_names import KnownVoices, named_voices
from parley.core.speaker_timeline import TimelineSnapshot
from parley.core.stream_diarizer import (
    CLOSING_MIN_S,
    CLOSING_STEP_S,
    StreamDiarizer,
    WindowSpeakers,
)


@dataclass(frozen=True)
class Relabel:
    """A stream's kept windows clustered at once."""

    timeline: TimelineSnapshot  # who spoke when, every turn settled
    # Shown live speaker → the timeline's speaker it takes over (at most one each).
    taken_over: Mapping[int, int]


def relabel(
    diarizer: StreamDiarizer, clustering: RecordingClustering = RecordingClustering()
) -> Relabel | None:
    """The windows ``diarizer`` kept (one every ``CLOSING_STEP_S``), clustered at once
    into the count its client gave (else up to its ``max_speakers``); None for a stream
    too short to have kept ``CLOSING_MIN_S`` of them."""
    windows = diarizer.kept_windows
    if len(windows) * CLOSING_STEP_S < CLOSING_MIN_S:
        return None
    config = diarizer.config
    count = config.speakers
    if count.exactly is None and count.at_most is None:
        count = replace(count, at_most=config.clustering.max_speakers)
    # Each embedding keeps as many seconds of neighbours as the windows' spacing gives:
    # a busy server's skipped steps keep windows further apart, and the neighbours
    # counted for one a second then reached across voices (bench/VARIANTS.md, "Windows
    # kept further apart under load").
    settings = clustering.for_step(diarizer.kept_spacing_s)
    speaker_of = cluster_windows(windows, settings, count)
    timeline = timeline_of(
        windows, diarizer.timeline.frame_step, speaker_of, settings.active_threshold
    )
    timeline = replace(timeline, names=voices_named(windows, speaker_of, diarizer.known))
    shown = diarizer.clustering.aliases()
    taken_over = take_over(speaker_of, diarizer.kept_speakers, shown, windows)
    return Relabel(timeline, taken_over)


def closing_timeline(
    diarizer: StreamDiarizer, clustering: RecordingClustering = RecordingClustering()
) -> TimelineSnapshot:
    """The timeline every final of a stream is labelled from once its last step has
    settled every label: its kept windows clustered at once, or, for a stream too short
    for that, its live timeline as it stands. A final settles with the labels of its
    time, and a voice the live linking founded twice and merged later keeps, in the
    finals already settled, the label that was merged away; the timeline has every merge
    applied, as a recording that short gets it (``whole_recording.replay_recording``)."""
    found = relabel(diarizer, clustering)
    return diarizer.as_recording() if found is None else found.timeline


def voices_named(
    windows: Sequence[WindowSpeakers], speaker_of: WindowSpeakerMap, known: KnownVoices
) -> dict[int, str]:
    """Clustered speaker → the known speaker whose clip its voice matches: its windows'
    embeddings averaged, each by its seconds alone, as the clustering's centroids are."""
    if not known:
        return {}
    sums: dict[int, np.ndarray] = {}
    for (w, s), speaker in speaker_of.items():
        local = windows[w].local
        vector = local.embeddings[s].astype(np.float64)
        weighted = vector / np.linalg.norm(vector) * float(local.alone_s[s])
        sums[speaker] = sums[speaker] + weighted if speaker in sums else weighted
    return named_voices(sums, known)


def take_over(
    speaker_of: WindowSpeakerMap,
    linked: Sequence[tuple[int | None, ...]],
    shown: tuple[int, ...],
    windows: Sequence[WindowSpeakers],
) -> dict[int, int]:
    """Shown live speaker → the clustered speaker it takes over. Each shown speaker's
    linked local speakers (``linked[w][s]``: window ``w``'s local speaker ``s``'s live
    speaker) went mostly, by seconds alone, to one clustered speaker; of the shown
    speakers that went mostly to the same one, the one with the most seconds takes it
    over, and the others keep labels of their own."""
    seconds: dict[int, dict[int, float]] = {}  # shown speaker → clustered speaker → s
    for (w, s), speaker in speaker_of.items():
        live = linked[w][s]
        if live is None:
            continue
        held = seconds.setdefault(shown[live] if live < len(shown) else live, {})
        held[speaker] = held.get(speaker, 0.0) + float(windows[w].local.alone_s[s])
    best: dict[int, tuple[float, int]] = {}  # clustered speaker → (seconds, shown speaker)
    for live, held in sorted(seconds.items()):
        speaker = max(held, key=lambda k: held[k])
        if held[speaker] > best.get(speaker, (0.0, -1))[0]:
            best[speaker] = (held[speaker], live)
    return {live: speaker for speaker, (_, live) in best.items()}
