"""Turns, labels and word timing on plain numbers: hysteresis, S1…Sn, speaker_update."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parley.core.speaker_labels import SpeakerLabels
from parley.core.speaker_timeline import SpeakerTimeline, TimelineSnapshot, Turn, TurnsByTime
from parley.core.stream_diarizer import DiarizationConfig
from parley.core.turns import ChangeCuts, TurnConfig, parts_at, settled_change, smooth_labels
from parley.core.word_timing import WordTimingConfig, fit_to_speech, fit_words, joined
from parley.core.words import TimedWord
from parley.protocol.messages import Final, FinalReason, SpeakerUpdate, Word
from parley.sessions.speaker_track import SpeakerTrack
from parley.workers.diarization import DiarizationWorker


def spans_of(*durations, gap=0.05):
    out, t = [], 0.0
    for d in durations:
        out.append((t, t + d))
        t += d + gap
    return out


# ------------------------------------------------------------------ hysteresis


def test_a_short_run_in_mid_sentence_joins_the_speaker_around_it():
    """ "S2 Good morning S3 everyone, let's get S2 started": the short S3 run is S2's."""
    spans = spans_of(0.4, 0.6, 0.4, 0.2, 0.2, 0.6)
    assert smooth_labels(spans, [1, 1, 2, 2, 2, 1]) == [1] * 6


def test_a_long_run_or_one_set_apart_by_pauses_stays_a_turn():
    """A run of min_turn_s is a turn (a short tail after it is not); so is a short run
    with pauses on both sides."""
    long_run = spans_of(0.6, 0.5, 0.6, 0.6, 0.4)
    assert smooth_labels(long_run, [0, 0, 1, 1, 0]) == [0, 0, 1, 1, 1]
    yes = [(0.0, 0.5), (0.6, 1.0), (1.6, 1.9), (2.5, 3.0)]  # "Yes." alone between pauses
    assert smooth_labels(yes, [0, 0, 1, 0]) == [0, 0, 1, 0]


def test_an_edge_run_next_to_a_turn_joins_it_and_unlabelled_words_take_their_run():
    spans = spans_of(0.2, 0.5, 0.5, 0.4)
    assert smooth_labels(spans, [0, 1, 1, 1]) == [1, 1, 1, 1]
    assert smooth_labels(spans, [None, 1, None, 1]) == [1, 1, 1, 1]
    assert smooth_labels([], []) == []


@given(
    st.lists(
        st.tuples(
            st.floats(0.01, 1.5), st.floats(0.0, 1.0), st.one_of(st.none(), st.integers(0, 3))
        ),
        max_size=30,
    )
)
def test_smoothing_never_leaves_a_short_run_without_pauses_around_it(words):
    """Whatever the labels: after smoothing, every run shorter than min_turn_s is set
    apart from each neighbour by a pause, and no label is invented."""
    config = TurnConfig()
    spans, t = [], 0.0
    for duration, gap, _ in words:
        spans.append((t + gap, t + gap + duration))
        t += gap + duration
    labels = [label for _, _, label in words]
    out = smooth_labels(spans, labels, config)
    assert set(out) - {None} <= set(labels) - {None}
    runs = []
    for i, label in enumerate(out):
        if runs and out[runs[-1][0]] == label:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    for k, (first, last) in enumerate(runs):
        if spans[last][1] - spans[first][0] >= config.min_turn_s:
            continue
        if k > 0:
            assert spans[first][0] - spans[runs[k - 1][1]][1] >= config.pause_s
        if k + 1 < len(runs):
            assert spans[runs[k + 1][0]][0] - spans[last][1] >= config.pause_s


def test_a_settled_change_is_found_only_once_both_turns_are_long_enough_and_settled():
    turns = (Turn(0.0, 3.0, 0), Turn(3.0, 6.0, 1))
    assert settled_change(TimelineSnapshot(turns, 3.5, 2), 0.0, 6.0) is None  # B not settled
    assert settled_change(TimelineSnapshot(turns, 4.5, 2), 0.0, 6.0) == pytest.approx(3.0)
    flicker = (Turn(0.0, 2.0, 0), Turn(2.0, 2.4, 1), Turn(2.4, 5.0, 0))
    assert settled_change(TimelineSnapshot(flicker, 5.0, 2), 0.0, 5.0) is None
    assert settled_change(TimelineSnapshot(turns, 6.0, 2), 2.5, 6.0) is None  # A too short here


def test_a_change_is_cut_once_it_is_change_latency_old_though_labels_may_still_change():
    """Labels settle 4 s after the audio; a final is cut at a change 2 s old (default)."""
    config = TurnConfig()
    turns = (Turn(0.0, 3.0, 0), Turn(3.0, 6.5, 1))
    heard = TimelineSnapshot(turns, settled_until=2.5, speaker_count=2, heard_until=6.5)
    assert settled_change(heard, 0.0, 6.5, config) == pytest.approx(3.0)  # 3.5 s old
    short = TimelineSnapshot(turns[:1] + (Turn(3.0, 3.8, 1),), 0.0, 2, heard_until=5.5)
    assert settled_change(short, 0.0, 5.5, config) is None  # old enough; B spoke 0.8 s only
    early = TimelineSnapshot(turns, settled_until=0.5, speaker_count=2, heard_until=4.5)
    assert settled_change(early, 0.0, 4.5, config) is None  # the change is not 2 s old yet
    assert settled_change(early, 0.0, 4.5, TurnConfig(change_latency_s=1.0)) == pytest.approx(3.0)
    assert settled_change(heard, 0.0, 6.5, TurnConfig(change_latency_s=4.0)) is None


def test_a_change_latency_past_the_labels_latency_is_refused():
    """A settled change cuts at once, so a change latency longer than the labels' own
    would be ignored: the settings refuse it rather than pretend."""
    with pytest.raises(ValueError, match="change latency"):
        DiarizationConfig(latency_s=4.0, turns=TurnConfig(change_latency_s=5.0))
    DiarizationConfig(latency_s=4.0, turns=TurnConfig(change_latency_s=4.0))


def test_a_young_change_cuts_once_two_steps_in_a_row_read_it_at_the_same_place():
    """With confirm_latency_s, a change 1 s old that the step before read within 0.3 s
    cuts; read once, read by the same step again, or moved, it waits for 2 s."""
    config = TurnConfig(confirm_latency_s=1.0)

    def step(change, heard):
        turns = (Turn(0.0, change, 0), Turn(change, heard, 1))
        return TimelineSnapshot(turns, settled_until=0.0, speaker_count=2, heard_until=heard)

    cuts = ChangeCuts(config)
    assert cuts.read(step(3.0, 4.0), 0.0, 4.0) is None  # the change is 1 s old, read once
    assert cuts.read(step(3.0, 4.0), 0.0, 4.0) is None  # the same step again
    assert cuts.read(step(3.1, 4.5), 0.0, 4.5) == pytest.approx(3.1)  # the next step agrees
    moved = ChangeCuts(config)
    assert moved.read(step(3.0, 4.0), 0.0, 4.0) is None
    assert moved.read(step(3.5, 4.5), 0.0, 4.5) is None  # read 0.5 s away: not confirmed
    assert moved.read(step(3.5, 5.0), 0.0, 5.0) == pytest.approx(3.5)  # confirmed there
    off = TurnConfig(confirm_latency_s=None, max_cut_age_s=None)
    assert ChangeCuts(off).read(step(3.0, 4.5), 0.0, 4.5) is None  # off: 2 s
    assert ChangeCuts(off).read(step(3.0, 5.0), 0.0, 5.0) == pytest.approx(3.0)


def test_a_change_found_too_late_is_not_cut_and_a_later_one_still_is():
    """With max_cut_age_s, a change first found more than that long after it (the open
    segment's end past it) is left in the segment, and remembered once; a later change
    still cuts."""
    config = TurnConfig(confirm_latency_s=None, max_cut_age_s=2.5)

    def step(heard):
        turns = (Turn(0.0, 3.0, 0), Turn(3.0, 5.0, 1), Turn(5.0, heard, 0))
        return TimelineSnapshot(turns, settled_until=0.0, speaker_count=2, heard_until=heard)

    assert ChangeCuts(config).read(step(5.2), 0.0, 5.2) == pytest.approx(3.0)  # 2.2 s old
    late = ChangeCuts(config)
    assert late.read(step(6.0), 0.0, 6.0) is None  # 3 s late; 5.0 too young
    assert late.read(step(7.2), 0.0, 7.2) == pytest.approx(5.0)  # the later one cuts
    assert late.uncut_between(0.0, 7.2) == [pytest.approx(3.0)]  # read twice, kept once
    assert late.uncut_between(3.5, 7.2) == []
    unbounded = ChangeCuts(TurnConfig(confirm_latency_s=None, max_cut_age_s=None))
    assert unbounded.read(step(7.2), 0.0, 7.2) == pytest.approx(3.0)
    assert unbounded.uncut_between(0.0, 7.2) == []


def test_at_the_defaults_only_a_change_confirmed_within_max_cut_age_cuts():
    """max_cut_age_s (2 s) is no longer than change_latency_s (2 s): a change first read
    once it is 2 s old is left uncut (its words parted), and the changes that cut are
    those two steps in a row read at one place while still young."""
    config = TurnConfig()
    assert config.max_cut_age_s is not None
    assert config.max_cut_age_s <= config.change_latency_s

    def step(change, heard):
        turns = (Turn(0.0, change, 0), Turn(change, heard, 1))
        return TimelineSnapshot(turns, settled_until=0.0, speaker_count=2, heard_until=heard)

    confirmed = ChangeCuts(config)
    assert confirmed.read(step(3.0, 4.0), 0.0, 4.0) is None
    assert confirmed.read(step(3.1, 4.5), 0.0, 4.5) == pytest.approx(3.1)
    late = ChangeCuts(config)  # first read when already 2 s old: a busy server's step
    assert late.read(step(3.0, 5.2), 0.0, 5.2) is None
    assert late.read(step(3.0, 5.7), 0.0, 5.7) is None
    assert late.uncut_between(0.0, 5.7) == [pytest.approx(3.0)]


def test_words_part_at_a_change_left_uncut_as_a_cut_would_part_them():
    """An interjection left inside a final keeps its own speaker when an uncut change
    parts it from the words before: no short run joins a neighbour across that time."""
    spans = spans_of(0.5, 0.5, 0.4, 0.3, 0.5, 0.5)  # no pauses; the 0.7 s run is short
    heard = [0, 0, 1, 1, 0, 0]
    assert smooth_labels(spans, heard) == [0] * 6
    assert parts_at(spans, []) == [slice(0, 6)]
    parts = parts_at(spans, [1.05, 1.8])  # the interjection's two changes
    assert parts == [slice(0, 2), slice(2, 4), slice(4, 6)]
    assert [s for p in parts for s in smooth_labels(spans[p], heard[p])] == heard
    assert parts_at(spans, [0.0, 9.0]) == [slice(0, 6)]  # times outside the words part none
    assert parts_at([], [1.0]) == [slice(0, 0)]


def test_a_young_change_waits_while_another_voice_was_heard_before_it():
    """A second voice heard briefly before the change (an interjection that may prove a
    turn once older): the young change, though confirmed, waits for the 2 s rule, which
    then finds the interjection's own change first."""
    config = TurnConfig(confirm_latency_s=1.0, max_cut_age_s=None)  # found 4 s late

    def step(heard, interjection_end=2.2):
        turns = (Turn(0.0, 1.5, 0), Turn(1.5, interjection_end, 1), Turn(interjection_end, 3.0, 0))
        turns += (Turn(3.0, heard, 1),)
        return TimelineSnapshot(turns, settled_until=0.0, speaker_count=2, heard_until=heard)

    cuts = ChangeCuts(config)
    assert cuts.read(step(4.0), 0.0, 4.0) is None
    assert cuts.read(step(4.5), 0.0, 4.5) is None  # confirmed, but voice 1 spoke at 1.5 s
    later = TimelineSnapshot(
        (Turn(0.0, 1.5, 0), Turn(1.5, 2.7, 1), Turn(2.7, 3.0, 0), Turn(3.0, 5.5, 1)),
        settled_until=0.0,
        speaker_count=2,
        heard_until=5.5,
    )
    assert cuts.read(later, 0.0, 5.5) == pytest.approx(1.5)  # 2 s old: the interjection


def test_a_turn_passing_to_a_newcomer_not_yet_shown_is_a_change_by_voice():
    """Speaker 1 is new and shown as 0 until confirmed: the shown turns hold no change,
    the turns by voice do, and that is where the final is cut."""
    timeline = SpeakerTimeline(frame_step=0.1, latency=4.0)
    activity = np.zeros((60, 2))
    activity[:30, 0] = activity[30:, 1] = 1.0
    timeline.add_window(0.0, activity)
    snapshot = timeline.snapshot(aliases=(0, 0), voices=(0, 1))
    assert {t.speaker for t in snapshot.turns} == {0}
    assert settled_change(snapshot, 0.0, 6.0) is None
    assert settled_change(snapshot.by_voice(), 0.0, 6.0) == pytest.approx(3.0, abs=0.1)


# ------------------------------------------------------------------ labels


def test_labels_are_numbered_in_order_of_first_appearance():
    labels = SpeakerLabels()
    assert labels.label(5, assign=False) is None  # partials never number anyone
    assert [labels.label(s) for s in (5, 2, 5, 7)] == ["S1", "S2", "S1", "S3"]


def test_a_merged_speaker_hands_its_label_over_or_frees_it():
    """Shown as someone without a label: it takes the label over. Shown as someone who
    has one: the label is freed, unless a settled final carries it."""
    labels = SpeakerLabels()
    labels.label(0), labels.label(3)
    labels.follow((0, 1, 2, 1))  # 3 is shown as 1 now (unlabelled): takes S2
    assert labels.label(1) == "S2" and labels.label(3, assign=False) is None
    labels.follow((0, 0, 2, 0))  # 1 merged into 0: S2 is free again
    assert labels.label(2) == "S2"
    labels.label(4)  # S3
    labels.settle(["S3"])
    labels.follow((0, 0, 2, 0, 2))  # 4 merged into 2: S3 stays taken (settled)
    assert labels.label(9) == "S4"


# ------------------------------------------------------------------ speaker_update


class NoModels:
    from parley.core.speaker_masks import FrameGrid

    grid = FrameGrid(0.1, 0.0)


def track() -> SpeakerTrack:
    return SpeakerTrack(DiarizationWorker(NoModels(), DiarizationConfig()))


def final(segment_id, *words):
    timed = [Word(text, a, b, 0.9) for text, a, b in words]
    return Final(
        segment_id,
        timed[0].start,
        timed[-1].end,
        " ".join(w for w, *_ in words),
        FinalReason.SILENCE,
        timed,
    )


def test_a_merge_relabels_unsettled_finals_with_speaker_update():
    """Two speakers in the first snapshot; a later one merges the second into the first:
    the unsettled final gets one speaker_update with every word relabelled; a settled
    final is left alone."""
    speakers = track()
    speakers.apply(TimelineSnapshot((Turn(0, 2, 0), Turn(2.2, 5, 1)), 0.0, 2, (0, 1)))
    sent = speakers.label_final(
        final(
            0,
            ("Hello", 0.2, 1.0),
            ("there.", 1.0, 1.8),
            ("Hi,", 2.4, 3.0),
            ("how", 3.1, 3.5),
            ("are", 3.5, 3.9),
            ("you?", 3.9, 4.6),
        )
    )
    assert [w.speaker for w in sent.words] == ["S1", "S1", "S2", "S2", "S2", "S2"]
    updates = speakers.apply(TimelineSnapshot((Turn(0, 2, 0), Turn(2.2, 5, 0)), 1.0, 1, (0, 0)))
    assert updates == [
        SpeakerUpdate(
            0, "S1", [Word(w.word, w.start, w.end, w.probability, "S1") for w in sent.words]
        )
    ]
    assert speakers.apply(TimelineSnapshot((Turn(0, 5, 0),), 6.0, 1, (0, 0))) == []
    # Settled now: a later change of mind sends nothing for it.
    assert speakers.apply(TimelineSnapshot((Turn(0, 5, 1),), 7.0, 1, (0, 1))) == []


def test_an_unconfirmed_speaker_confirmed_later_is_announced_within_the_latency():
    """Words first shown as S1 (the new voice was not confirmed) become S2 by update."""
    speakers = track()
    speakers.apply(TimelineSnapshot((Turn(0, 3, 0), Turn(3.2, 6, 0)), 0.0, 1, (0, 0)))
    sent = speakers.label_final(final(4, ("Yes,", 3.3, 3.8), ("I", 3.9, 4.1), ("agree.", 4.1, 4.9)))
    assert sent.speaker == "S1"
    updates = speakers.apply(TimelineSnapshot((Turn(0, 3, 0), Turn(3.2, 6, 1)), 3.0, 2, (0, 1)))
    assert [(u.segment_id, u.speaker) for u in updates] == [(4, "S2")]
    assert {w.speaker for w in updates[0].words} == {"S2"}


def three_live_speakers() -> tuple[tuple[Turn, ...], SpeakerTrack]:
    """Three live speakers, the third heard twice (its second final ends at 13 s), all
    four finals sent and labelled S1, S2, S3, S3."""
    turns = (Turn(0, 2, 0), Turn(2.2, 5, 1), Turn(5.2, 8, 2), Turn(11.8, 13.2, 2))
    speakers = track()
    speakers.apply(TimelineSnapshot(turns, 0.0, 3, (0, 1, 2)))
    spoken = [("Hello.", 0.2, 1.8), ("Hi.", 2.4, 4.6), ("So.", 5.4, 6.4), ("Hm.", 12.0, 13.0)]
    sent = [speakers.label_final(final(i, word)) for i, word in enumerate(spoken)]
    assert [f.speaker for f in sent] == ["S1", "S2", "S3", "S3"]
    return turns, speakers


def test_the_closing_timeline_relabels_settled_finals_in_order_of_appearance():
    """At the end of a stream, the whole stream's clustering relabels finals long settled:
    the third voice was the first's (S3 → S1), and labels are numbered by appearance
    whatever the clustering's own indices. "Hm.", which that timeline gives nobody, keeps
    its speaker, under the label its speaker's words took in the others (S3 → S1): no
    third label is left behind."""
    turns, speakers = three_live_speakers()
    assert speakers.apply(TimelineSnapshot(turns, 14.0, 3, (0, 1, 2))) == []  # all settled
    closing = TimelineSnapshot((Turn(0, 2, 4), Turn(2.2, 5, 3), Turn(5.2, 8, 4)), 14.0, 2)
    updates = speakers.apply(TimelineSnapshot(turns, 14.0, 3, (0, 1, 2), closing=closing))
    assert [(u.segment_id, u.speaker, [w.speaker for w in u.words]) for u in updates] == [
        (2, "S1", ["S1"]),
        (3, "S1", ["S1"]),
    ]


def test_the_closing_relabel_reaches_the_finals_the_last_frames_did_not_settle():
    """The stream's last final may end past its last frame (its pad): at the end nothing
    is left to settle it, so the closing relabel labels it with the rest, and it cannot
    keep a live label numbered otherwise than the finals relabelled around it."""
    turns, speakers = three_live_speakers()
    closing = TimelineSnapshot(
        (Turn(0, 2, 4), Turn(2.2, 5, 3), Turn(5.2, 8, 5), Turn(11.8, 13.2, 4)), 12.5, 3
    )
    updates = speakers.apply(TimelineSnapshot(turns, 12.5, 3, (0, 1, 2), closing=closing))
    assert [(u.segment_id, u.speaker) for u in updates] == [(3, "S1")]  # "Hm." ends at 13


def test_a_checkpoint_relabels_settled_finals_and_the_live_speakers_keep_its_labels():
    """Mid-stream, the kept windows' clustering joins a third live voice to the first:
    its settled final is relabelled (S3 → S1), a final still unsettled is left to the live
    labels, and later finals of the live speakers that took the clustered ones over
    carry the clustering's labels; the third live speaker, which took none over, keeps
    its own."""
    turns, speakers = three_live_speakers()
    closing = TimelineSnapshot((Turn(0, 2, 7), Turn(2.2, 5, 8), Turn(5.2, 8, 7)), 11.0, 2)
    snapshot = TimelineSnapshot(turns, 11.0, 3, (0, 1, 2), closing=closing, taken_over={0: 7, 1: 8})
    updates = speakers.apply(snapshot)
    assert [(u.segment_id, u.speaker) for u in updates] == [(2, "S1")]  # "Hm." unsettled
    later = (*turns, Turn(14, 15, 1), Turn(15.2, 16, 0))
    assert speakers.apply(TimelineSnapshot(later, 14.0, 3, (0, 1, 2))) == []  # "Hm." kept
    more = [
        speakers.label_final(final(i, w))
        for i, w in ((4, ("Yes.", 14.1, 14.9)), (5, ("No.", 15.3, 15.9)))
    ]
    assert [f.speaker for f in more] == ["S2", "S1"]


def test_a_checkpoint_keeps_the_numbers_a_client_has_seen_where_it_can():
    """The clustering puts "Hello." (S1) with "Hi." (S2, longer) and "So." (S3) alone:
    each clustered speaker keeps the number most of its words' time had, so only
    "Hello." is renamed (S1 → S2), where numbering afresh would rename the other two."""
    turns, speakers = three_live_speakers()
    closing = TimelineSnapshot((Turn(0, 2, 8), Turn(2.2, 5, 8), Turn(5.2, 8, 7)), 11.0, 2)
    snapshot = TimelineSnapshot(turns, 11.0, 3, (0, 1, 2), closing=closing, taken_over={1: 8})
    updates = speakers.apply(snapshot)
    assert [(u.segment_id, u.speaker) for u in updates] == [(0, "S2")]


def test_the_clustered_speakers_are_taken_over_by_the_live_speaker_holding_most_of_each():
    """Each shown speaker goes mostly to one clustered speaker; two going to the same
    one: the one with more seconds alone there takes it over, the other none."""
    from parley.core.speaker_relabel import take_over
    from parley.core.speakers import LocalSpeakers
    from parley.core.stream_diarizer import WindowSpeakers

    def window(alone):
        n = len(alone)
        local = LocalSpeakers(np.zeros((n, 2)), np.ones(n), np.array(alone), np.array(alone))
        return WindowSpeakers(0.0, np.ones((10, n)), local)

    windows = [window([3.0, 1.0]), window([2.0, 1.0]), window([1.0, 0.5])]
    linked = [(0, 1), (0, 2), (3, 1)]  # live speakers; 3 is shown as 0 (not confirmed)
    clustered = {(0, 0): 0, (0, 1): 1, (1, 0): 0, (1, 1): 0, (2, 0): 0, (2, 1): 1}
    assert take_over(clustered, linked, (0, 1, 2, 0), windows) == {0: 0, 1: 1}
    # Live 2 went to 0 as well, with less than live 0: it takes nothing over.


def test_checkpoint_relabels_come_every_so_often_and_thin_out_as_the_stream_grows():
    """Due once 30 s of windows are kept, then every relabel_every_s or a quarter of the
    stream, whichever is longer; never past RELABEL_UNTIL_S, never when turned off."""
    from parley.core.stream_diarizer import RELABEL_UNTIL_S, StreamDiarizer
    from test_diarization_worker import CountingModels

    short = StreamDiarizer(CountingModels(), DiarizationConfig())
    short.replay(np.zeros(20 * 16000, np.float32))
    assert not short.relabel_due(20.0)
    diarizer = StreamDiarizer(CountingModels(), DiarizationConfig(relabel_every_s=15.0))
    diarizer.replay(np.zeros(40 * 16000, np.float32))
    due = [now for now in np.arange(40.0, 120.0, 0.5) if diarizer.relabel_due(float(now))]
    assert due == [40.0, 55.0, 70.0, 87.5, 109.5]
    assert not diarizer.relabel_due(RELABEL_UNTIL_S + 1)
    off = StreamDiarizer(CountingModels(), DiarizationConfig(relabel_every_s=0.0))
    off.replay(np.zeros(40 * 16000, np.float32))
    assert not off.relabel_due(40.0)


@given(
    st.lists(st.tuples(st.floats(0, 100), st.floats(0.1, 15), st.integers(0, 3)), max_size=40),
    st.floats(0, 110),
    st.floats(0, 5),
)
def test_turns_found_by_time_name_the_speaker_the_whole_snapshot_does(turns, start, length):
    """TurnsByTime.around keeps every turn that can name a speaker in [start, end]."""
    snapshot = TimelineSnapshot(tuple(Turn(a, a + d, k) for a, d, k in sorted(turns)), 120.0, 4)
    near = TurnsByTime(snapshot).around(start, start + length)
    assert near.speaker_of(start, start + length) == snapshot.speaker_of(start, start + length)


def test_a_stream_longer_than_the_closing_span_keeps_its_live_labels():
    """A final older than closing_s has left the span: relabelling the rest afresh would
    give its label to someone else, so nothing is relabelled."""
    speakers = SpeakerTrack(DiarizationWorker(NoModels(), DiarizationConfig(closing_s=5.0)))
    turns = (Turn(0, 2, 0), Turn(8, 10, 1))
    speakers.apply(TimelineSnapshot(turns, 0.0, 2, (0, 1)))
    speakers.label_final(final(0, ("Hello.", 0.2, 1.8)))
    speakers.label_final(final(1, ("Hi.", 8.2, 9.8)))
    closing = TimelineSnapshot((Turn(0, 2, 0), Turn(8, 10, 0)), 11.0, 1)
    assert speakers.apply(TimelineSnapshot(turns, 11.0, 2, (0, 1), closing=closing)) == []


def test_a_stream_keeps_a_window_every_closing_step_and_short_ones_are_not_relabelled():
    """The diarizer keeps one window every CLOSING_STEP_S of the last closing_s; a stream
    with under CLOSING_MIN_S of them gets no closing timeline, a longer one does."""
    from parley.core.speaker_relabel import relabel
    from parley.core.stream_diarizer import CLOSING_MIN_S, CLOSING_STEP_S, StreamDiarizer
    from test_diarization_worker import CountingModels

    short_s = CLOSING_MIN_S - 2 * CLOSING_STEP_S
    short = StreamDiarizer(CountingModels(), DiarizationConfig())
    short.replay(np.zeros(int(short_s * 16000), np.float32))
    assert relabel(short) is None
    long = StreamDiarizer(CountingModels(), DiarizationConfig(closing_s=60.0))
    long.replay(np.zeros(int(100 * 16000), np.float32))
    starts = [w.start for w in long.kept_windows]
    assert all(b - a >= CLOSING_STEP_S for a, b in zip(starts, starts[1:]))
    assert starts[-1] - starts[0] <= 60.0 and len(starts) >= 60.0 / CLOSING_STEP_S
    closing = relabel(long)
    assert closing is not None and closing.timeline.speaker_count == 1
    assert closing.taken_over == {0: 0}  # the one live speaker keeps the one voice


def test_windows_kept_further_apart_under_load_are_clustered_for_their_spacing(monkeypatch):
    """A busy server skips steps, so the windows it keeps for the closing relabel can be
    more than CLOSING_STEP_S apart; the clustering then links each embedding to as many
    seconds of neighbours as one a CLOSING_STEP_S would, not to as many windows."""
    from parley.core import speaker_relabel
    from parley.core.recording_speakers import RecordingClustering
    from parley.core.stream_diarizer import CLOSING_STEP_S, StreamDiarizer
    from test_diarization_worker import CountingModels

    used: list[RecordingClustering] = []
    cluster_windows = speaker_relabel.cluster_windows

    def recorded(windows, settings, count):
        used.append(settings)
        return cluster_windows(windows, settings, count)

    monkeypatch.setattr(speaker_relabel, "cluster_windows", recorded)
    audio = np.zeros(int(60 * 16000), np.float32)
    for every in (1, 3):  # every step, then one step in three (1.5 s apart)
        stream = StreamDiarizer(CountingModels(), DiarizationConfig())
        for k, (window, start, _) in enumerate(stream.windows(audio)):
            if k % every == 0 and len(window) >= 0.5 * 16000:
                stream.link(stream.observe(window, start))
        assert stream.kept_spacing_s == pytest.approx(max(CLOSING_STEP_S, every * 0.5))
        assert speaker_relabel.relabel(stream) is not None
    idle, busy = used
    assert idle == RecordingClustering().for_step(CLOSING_STEP_S)
    assert busy == RecordingClustering().for_step(1.5)
    assert busy.neighbours < idle.neighbours


class TwoVoices:
    """A voice above zero and one below: each window's local speakers are the frames of
    each sign, and an embedding says which sign its samples have."""

    from parley.core.speaker_masks import FrameGrid

    grid = FrameGrid(0.1, 0.0)

    def segment(self, windows):
        out = []
        for window in windows:
            frames = window[: len(window) // 1600 * 1600].reshape(-1, 1600).mean(axis=1)
            out.append(np.stack([frames > 0, frames < 0], axis=1).astype(float))
        return out

    def embed(self, window, masks):
        out = np.full((len(masks), 2), np.nan, dtype=np.float32)
        for i, mask in enumerate(masks):
            if mask.any():
                out[i] = [1.0, 0.0] if window[mask].mean() > 0 else [0.0, 1.0]
        return out


@pytest.mark.parametrize("duration_s", [20.0, 33.9, 34.0, 40.0])
def test_a_recording_is_linked_live_exactly_when_a_stream_of_it_keeps_its_live_labels(
    duration_s,
):
    """A recording is diarized as a stream of it is where that stream keeps under
    CLOSING_MIN_S of windows (no closing relabel), else clustered at once; a number of
    speakers asked for is clustered however short (the live linking cannot be held to it)."""
    from parley.core.speaker_count import SpeakerCount
    from parley.core.stream_diarizer import CLOSING_MIN_S, CLOSING_STEP_S, StreamDiarizer
    from parley.core.whole_recording import diarized_live
    from test_diarization_worker import CountingModels

    stream = StreamDiarizer(CountingModels(), DiarizationConfig())
    stream.replay(np.zeros(int(duration_s * 16000), np.float32))
    keeps_live_labels = len(stream.kept_windows) * CLOSING_STEP_S < CLOSING_MIN_S
    assert diarized_live(duration_s, 5.0, SpeakerCount()) == keeps_live_labels
    assert diarized_live(duration_s, 5.0, SpeakerCount(at_most=3)) == keeps_live_labels
    assert not diarized_live(duration_s, 5.0, SpeakerCount(exactly=2))
    assert not diarized_live(duration_s, 5.0, SpeakerCount(at_least=2))


class Silence(TwoVoices):
    """Nobody speaks in any window."""

    def segment(self, windows):
        return [np.zeros((len(w) // 1600, 1)) for w in windows]


def test_a_silent_stream_long_enough_for_the_closing_relabel_gets_one_without_speakers():
    """Windows with nobody heard alone long enough to embed: the clustering gets no voice
    and says so (an empty timeline), where it failed on an empty array."""
    from parley.core.speaker_relabel import relabel
    from parley.core.stream_diarizer import StreamDiarizer

    stream = StreamDiarizer(Silence(), DiarizationConfig())
    stream.replay(np.zeros(40 * 16000, np.float32))
    closing = relabel(stream)
    assert closing is not None and closing.timeline.turns == ()


@pytest.mark.parametrize("threads", [2, 3, 64])
def test_a_recordings_windows_shared_among_threads_are_the_windows_of_one(threads):
    """observe_recording's parts, laid end to end, are the windows one thread observes
    (the tail after the last step included), and each part says when it is done."""
    from parley.core.whole_recording import observe_recording
    from test_diarization_worker import CountingModels

    audio = np.zeros(int(23.3 * 16000), np.float32)
    whole = observe_recording(CountingModels(), audio, DiarizationConfig(), 1.0)
    heard: list[list[float]] = [[] for _ in range(threads)]
    parts = [
        observe_recording(
            CountingModels(), audio, DiarizationConfig(), 1.0, heard[k].append, (k, threads)
        )
        for k in range(threads)
    ]
    shared = [window for part in parts for window in part]
    assert [w.start for w in shared] == [w.start for w in whole]
    assert all(np.array_equal(a.activity, b.activity) for a, b in zip(shared, whole))
    assert all(told[-1] == 1.0 for told in heard)


def test_a_long_recordings_windows_are_spaced_out_to_a_bounded_number():
    """A recording's windows are as far apart as asked, until there would be more than
    MAX_CLUSTERED_WINDOWS of them: a 4-hour recording's are 2 s apart, not 1 s."""
    from parley.core.whole_recording import MAX_CLUSTERED_WINDOWS, clustered_step_s

    assert clustered_step_s(3600.0, 1.0) == 1.0
    assert clustered_step_s(4 * 3600.0, 1.0) == 2.0
    assert clustered_step_s(4 * 3600.0, 2.5) == 2.5
    assert 4 * 3600.0 / clustered_step_s(4 * 3600.0, 0.5) == MAX_CLUSTERED_WINDOWS


def test_a_recording_linked_live_numbers_its_speakers_by_first_appearance():
    """replay_recording: every label settled, the voices numbered 0, 1 in the order they
    first speak, each turn where its voice is."""
    from parley.core.whole_recording import replay_recording

    turns = [(0.0, 6.0, 1), (6.5, 12.0, -1), (12.5, 18.0, 1)]
    audio = np.zeros(18 * 16000, np.float32)
    for start, end, sign in turns:
        audio[int(start * 16000) : int(end * 16000)] = 0.1 * sign
    snapshot = replay_recording(TwoVoices(), audio, DiarizationConfig())
    assert snapshot.speaker_count == 2
    assert snapshot.settled_until == pytest.approx(18.0)
    for start, end, sign in turns:
        assert snapshot.speaking(start + 0.5, end - 0.5) == (0 if sign > 0 else 1)


# ------------------------------------------------------------------ word timing


def word(text, start, end):
    return TimedWord(text, start, end, 0.9)


def test_words_follow_voiced_audio_and_never_span_a_pause():
    """The first word starts where speech does, not in the pad; a word stretched over a
    0.8 s pause keeps only its voiced side; speech after a pause starts and ends a word."""
    regions = [(0.3, 1.4), (2.2, 3.0)]
    fitted = fit_words(
        [word(" Hello", 0.0, 0.7), word(" world.", 0.7, 2.6), word(" Again.", 2.6, 2.8)], regions
    )
    assert [(w.start, w.end) for w in fitted] == [(0.3, 0.7), (0.7, 1.4), (2.2, 3.0)]


def test_words_inside_speech_keep_their_times_even_when_they_last_no_time():
    """The aligner gives some words no duration ("of" between two frames): they stay put."""
    words = [word(" kind", 1.0, 1.2), word(" of", 1.2, 1.2), word(" thing", 1.2, 1.6)]
    fitted = fit_words(words, [(0.9, 1.7)])
    assert [(w.start, w.end) for w in fitted] == [(0.9, 1.2), (1.2, 1.2), (1.2, 1.7)]


def test_a_word_in_no_speech_moves_to_the_nearest_speech():
    fitted = fit_words([word(" a", 0.1, 0.3), word(" b", 1.5, 1.7)], [(0.5, 1.0)])
    assert [(round(w.start, 3), round(w.end, 3)) for w in fitted] == [(0.5, 0.7), (0.8, 1.0)]


def test_overlong_words_are_cut_to_twice_the_median_from_the_pause_side():
    """openai-whisper's limit: a word after a pause loses its start, one before a pause
    or a sentence end loses its end."""
    words = [
        word(" So", 0.0, 1.5),
        word(" we", 1.5, 1.7),
        word(" can", 1.7, 1.9),
        word(" go", 1.9, 2.1),
        word(" now.", 2.1, 3.6),
    ]
    fitted = fit_words(words, [])
    assert [(round(w.start, 2), round(w.end, 2)) for w in fitted] == [
        (1.1, 1.5),
        (1.5, 1.7),
        (1.7, 1.9),
        (1.9, 2.1),
        (2.1, 2.5),
    ]


@given(
    st.lists(st.tuples(st.floats(0, 10), st.floats(0, 3)), max_size=20),
    st.lists(st.tuples(st.floats(0, 12), st.floats(0.03, 2)), max_size=6),
)
def test_fitted_words_stay_in_order_inside_speech_and_span_no_long_gap(raw_words, raw_regions):
    words = [word(f" w{i}", s, s + d) for i, (s, d) in enumerate(sorted(raw_words))]
    regions, end = [], -1.0
    for start, length in sorted(raw_regions):
        if start > end + WordTimingConfig().bridge_s:
            regions.append((start, start + length))
            end = start + length
    fitted = fit_words(words, regions)
    assert len(fitted) == len(words)
    for a, b in zip(fitted, fitted[1:]):
        assert a.start <= a.end <= b.start + 1e-9
    for w in fitted:
        if regions and w.end > w.start:
            assert any(s - 1e-9 <= w.start and w.end <= e + 1e-9 for s, e in regions)


def test_with_labels_words_are_cut_back_to_the_speech_the_segmentation_heard():
    """Music in the pauses: the VAD's voiced regions (and so the words) run through them;
    the speaker segmentation heard speech at 1.0-2.0 and 3.0-4.0 only. The words are cut
    back to it, 0.1 s either side; a word in no speech keeps its times, and one running
    past what the windows have heard (5.0) keeps that part."""
    speakers = track()
    speakers.apply(TimelineSnapshot((Turn(1.0, 2.0, 0), Turn(3.0, 4.0, 0)), 0.0, 1, (0,), 5.0))
    sent = speakers.label_final(
        final(
            0,
            ("Play", 0.2, 1.5),
            ("it", 1.5, 2.9),
            ("now.", 2.9, 4.2),
            ("Hm.", 4.3, 4.6),
            ("Again.", 4.8, 5.5),
        )
    )
    assert [(w.start, w.end) for w in sent.words] == [
        (0.9, 1.5),
        (1.5, 2.1),
        (2.9, 4.1),
        (4.3, 4.6),
        (4.9, 5.5),
    ]


def test_snapshot_speech_is_everyone_s_turns_joined_and_what_is_not_heard_yet():
    snapshot = TimelineSnapshot(
        (Turn(0.5, 1.5, 0), Turn(1.2, 2.0, 1), Turn(3.0, 3.5, 0)), 0.0, 2, (0, 1), 4.0
    )
    assert snapshot.speech(1.0, 5.0) == [(1.0, 2.0), (3.0, 3.5), (4.0, 5.0)]
    assert snapshot.speech(2.1, 2.9) == []


@given(
    st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), max_size=20),
    st.lists(st.tuples(st.floats(0, 12), st.floats(0.01, 2)), max_size=6),
)
def test_words_fitted_to_speech_stay_in_it_in_order_and_only_shrink(raw_words, raw_speech):
    """Words in order (gaps, lengths) and speech anywhere: every word is left as it was
    or ends up inside the speech (widened by the margin, gaps bridged); in order, never
    overlapping. A word that was in the speech never ends later, and starts earlier only
    as its stretch's first word, back to where that stretch's speech starts."""
    config = WordTimingConfig()
    spans, at = [], 0.0
    for gap, length in raw_words:
        spans.append((at + gap, at + gap + length))
        at = spans[-1][1]
    speech, end = [], -1.0
    for start, length in sorted(raw_speech):
        if start > end:
            speech.append((start, start + length))
            end = start + length
    fitted = fit_to_speech(spans, speech, config)
    assert len(fitted) == len(spans)
    if not speech:
        assert fitted == spans
        return
    reach = config.speech_margin_s
    stretches = joined([(x - reach, y + reach) for x, y in speech], config.bridge_s)
    for (a, b), (s, e) in zip(spans, fitted):
        assert s <= e
        holding = [(x, y) for x, y in stretches if x - 1e-9 <= s and e <= y + 1e-9]
        assert holding or (s, e) == (a, b)
        if any(min(b, y) > max(a, x) for x, y in stretches):  # it was in the speech
            assert e <= b + 1e-9
            assert s >= a - 1e-9 or s >= holding[0][0] + reach - 1e-9
    for (_, e), (s, _) in zip(fitted, fitted[1:]):
        assert e <= s + 1e-9


def test_words_drifted_late_over_music_are_placed_back_in_the_speech():
    """Music in the pauses: the VAD ran through them and the aligner put a sentence's
    words 0.7 s late, its first word into the music before the speech. That word moves
    to where the speech starts, the next follows it, and words already in the speech
    keep their times; a word in the music after the speech stays (nothing says whose)."""
    config = WordTimingConfig()
    speech = [(6.77, 9.25), (10.56, 13.4)]
    words = [(5.9, 6.4), (7.5, 7.9), (8.0, 8.6), (8.7, 9.2), (9.6, 10.2), (10.6, 11.0)]
    fitted = fit_to_speech(words, speech, config)
    assert fitted[0] == (pytest.approx(6.77), pytest.approx(7.27))
    assert fitted[1] == (pytest.approx(7.27), 7.9)
    assert fitted[2:] == [(8.0, 8.6), (8.7, 9.2), (9.6, 10.2), (10.6, 11.0)]


def test_a_word_the_segmentation_missed_stays_where_it_was():
    """A quiet word the segmentation did not hear, between speech that its words start
    with: no drift to mend, so it is not moved."""
    fitted = fit_to_speech(
        [(1.0, 1.5), (2.4, 2.7), (3.5, 4.0)], [(1.0, 1.6), (3.5, 4.2)], WordTimingConfig()
    )
    assert fitted == [(1.0, 1.5), (2.4, 2.7), (3.5, 4.0)]
