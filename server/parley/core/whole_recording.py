"""A recording known in full, through the stream's own steps (pure: the models behind
the ``SpeakerModel`` protocol).

``observe_recording`` takes the live window over the whole recording (every
``clustered_step_s``), for ``recording_speakers`` to cluster at once; a recording too
short for that (``diarized_live``) is labelled as a real-time stream of it is
(``replay_recording``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from parley.core.audio import SAMPLE_RATE
from parley.core.speaker_count import SpeakerCount
from parley.core.speaker_timeline import TimelineSnapshot
from parley.core.stream_diarizer import (
    CLOSING_MIN_S,
    CLOSING_STEP_S,
    DiarizationConfig,
    Heard,
    LiveFirst,
    SpeakerModel,
    StreamDiarizer,
    WindowSpeakers,
)

# A longer recording's windows are spaced out to this many at most: as many as a stream's
# two hours of closing relabel keep, one a second (clustered in under half a minute, in
# about half a GB); a 4-hour recording's are 2 s apart.
MAX_CLUSTERED_WINDOWS = 7200


def clustered_step_s(duration_s: float, step_s: float) -> float:
    """How far apart a recording's windows are when its voices are clustered at once:
    ``step_s``, or further apart where that would make over MAX_CLUSTERED_WINDOWS."""
    return max(step_s, duration_s / MAX_CLUSTERED_WINDOWS)


def diarized_live(duration_s: float, window_s: float, count: SpeakerCount) -> bool:
    """Whether a recording ``duration_s`` long is diarized as a real-time stream of it is
    (``replay_recording``), not clustered at once: a stream that short keeps fewer than
    CLOSING_MIN_S of windows (one every CLOSING_STEP_S from its first full window's start,
    0, to its last, ``duration_s - window_s``) and keeps its live labels. Unless the
    caller asked for a number of speakers: the live linking founds speakers as it hears
    them, so it can be capped but not held to a count, and the clustering can."""
    kept = int((duration_s - window_s) // CLOSING_STEP_S) + 1
    return kept * CLOSING_STEP_S < CLOSING_MIN_S and count.exactly is None and count.at_least == 1


def observe_recording(
    models: SpeakerModel,
    audio: np.ndarray,
    config: DiarizationConfig,
    step_s: float,
    on_heard: Heard | None = None,
    part: tuple[int, int] = (0, 1),
    live_first: LiveFirst | None = None,
) -> list[WindowSpeakers]:
    """The models' part over a whole recording: the live window (``config.window_s``)
    every ``step_s``, the last one ending where the recording does. ``part`` (k, n): only
    the k-th of n runs of consecutive windows, so that n threads may share the work (the
    windows are the same either way). ``on_heard`` is told the share of them observed;
    ``live_first`` is called before each."""
    diarizer = StreamDiarizer(
        models, replace(config, step_s=step_s, latency_s=max(config.latency_s, step_s))
    )
    shortest = config.min_window_s * SAMPLE_RATE
    due = [
        (window, start) for window, start, _ in diarizer.windows(audio) if len(window) >= shortest
    ]
    covered = int(len(audio) // int(step_s * SAMPLE_RATE) * int(step_s * SAMPLE_RATE))
    if covered < len(audio) and len(audio) >= shortest:  # the tail after the last step
        tail = max(0, len(audio) - int(config.window_s * SAMPLE_RATE))
        due.append((audio[tail:], tail / SAMPLE_RATE))
    k, n = part
    mine = due[k * len(due) // n : (k + 1) * len(due) // n]
    windows = []
    for window, start in mine:
        if live_first is not None:
            live_first()
        windows.append(diarizer.observe(window, start))
        if on_heard is not None:
            on_heard(len(windows) / len(mine))
    if on_heard is not None and not mine:  # more threads than windows: this part is done
        on_heard(1.0)
    return windows


def replay_recording(
    models: SpeakerModel,
    audio: np.ndarray,
    config: DiarizationConfig,
    on_heard: Heard | None = None,
    live_first: LiveFirst | None = None,
) -> TimelineSnapshot:
    """Who spoke when in a recording, as a real-time stream of it ends up labelled
    without a closing relabel: every window linked live, then every label settled.

    For recordings too short to cluster (``diarized_live``), as for streams: clustered at
    once, a voice heard a few seconds has one or two embeddings, too few for the graph to
    link, and the live linking, which sees every window, labels them better
    (bench/README.md, "Recordings: speakers of a whole file"). ``on_heard`` and
    ``live_first``: as for ``observe_recording``."""
    diarizer = StreamDiarizer(models, config)
    diarizer.replay(audio, on_heard=on_heard, live_first=live_first)
    return diarizer.as_recording()
