"""Online speaker linking and the rolling speaker timeline, on plain numbers."""

import numpy as np
import pytest

from parley.core.ring import AudioRing
from parley.core.speaker_timeline import SpeakerTimeline, TimelineSnapshot, Turn
from parley.core.speakers import ClusteringConfig, OnlineClustering
from parley.runtime.speaker_track import smooth_runs


def unit(*values):
    v = np.array(values, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_two_local_speakers_never_share_a_global_speaker():
    """Even when both are closest to the same centroid, the assignment keeps them apart."""
    clustering = OnlineClustering(ClusteringConfig(max_speakers=2, new_speaker_distance=0.5))
    clustering.assign(np.stack([unit(1, 0, 0)]), np.array([0.9]))
    clustering.assign(np.stack([unit(0, 1, 0)]), np.array([0.9]))
    both_near_first = np.stack([unit(1, 0.1, 0), unit(1, 0.2, 0)])
    mapping = clustering.assign(both_near_first, np.array([0.9, 0.9]))
    assert sorted(mapping) == [0, 1]


def test_new_speaker_when_nobody_is_close_until_the_maximum():
    """A distant embedding starts a new speaker; past max_speakers it joins the closest free one."""
    clustering = OnlineClustering(ClusteringConfig(max_speakers=2, new_speaker_distance=0.3))
    assert clustering.assign(np.stack([unit(1, 0, 0)]), np.array([1.0])) == [0]
    assert clustering.assign(np.stack([unit(0.95, 0.05, 0)]), np.array([1.0])) == [0]
    assert clustering.assign(np.stack([unit(0, 1, 0)]), np.array([1.0])) == [1]
    assert clustering.assign(np.stack([unit(0, 0, 1)]), np.array([1.0])) in ([0], [1])
    assert clustering.speaker_count == 2


def test_inactive_or_unembedded_speakers_are_not_assigned():
    """Quiet local speakers and NaN embeddings map to nobody and create nobody."""
    clustering = OnlineClustering(ClusteringConfig())
    nan = np.full(3, np.nan, dtype=np.float32)
    assert clustering.assign(np.stack([unit(1, 0, 0), nan]), np.array([0.2, 0.9])) == [None,
                                                                                         None]
    assert clustering.speaker_count == 0


def test_timeline_averages_windows_and_settles_after_the_latency():
    """Overlapping windows are averaged; frames settle latency seconds later, then stay."""
    timeline = SpeakerTimeline(frame_step=0.1, latency=1.0)
    first = np.zeros((20, 2))
    first[:10, 0] = 1.0   # speaker 0 for 1 s, then speaker 1
    first[10:, 1] = 1.0
    timeline.add_window(0.0, first)
    timeline.advance(now=2.15)  # frames ending by 1.15 s settle: speaker 0 has stopped
    settled = timeline.settled_turns()
    assert settled == [Turn(0.0, 1.0, 0)]
    snapshot = timeline.snapshot()
    assert snapshot.settled_until == pytest.approx(1.1)
    assert snapshot.speaker_of(1.2, 1.8) == 1
    timeline.advance(now=5.0, final=True)
    assert timeline.settled_turns()[-1] == Turn(1.0, pytest.approx(2.0), 1)


def test_snapshot_picks_the_speaker_with_most_overlap_or_the_nearest():
    """Spans take the speaker they overlap most; a gap word takes a turn within a second."""
    snapshot = TimelineSnapshot((Turn(0, 2, 0), Turn(1.5, 4, 1)), 4.0, 2)
    assert snapshot.speaker_of(1.0, 2.0) == 0
    assert snapshot.speaker_of(1.8, 3.0) == 1
    assert snapshot.speaker_of(4.5, 4.6) == 1
    assert snapshot.speaker_of(9.0, 9.5) is None


def test_ring_keeps_the_latest_samples():
    """The ring returns the newest samples in order, across wrap-arounds and big pushes."""
    ring = AudioRing(5)
    ring.push(np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(ring.latest(10), [0, 1, 2])
    ring.push(np.arange(3, 7, dtype=np.float32))
    np.testing.assert_array_equal(ring.latest(5), [2, 3, 4, 5, 6])
    ring.push(np.arange(10, 22, dtype=np.float32))
    np.testing.assert_array_equal(ring.latest(3), [19, 20, 21])
    assert ring.total == 19


def test_lone_words_between_one_speakers_turns_are_smoothed():
    """A one-word flip inside a speaker's run joins it; real turns and edges stay."""
    assert smooth_runs(["S1", "S1", "S2", "S1", "S1"]) == ["S1"] * 5
    assert smooth_runs(["S1", "S2", "S2", "S1"]) == ["S1", "S2", "S2", "S1"]
    assert smooth_runs(["S2", "S1", "S1"]) == ["S2", "S1", "S1"]
    assert smooth_runs(["S1", None, "S1"]) == ["S1", "S1", "S1"]
    assert smooth_runs([]) == []
