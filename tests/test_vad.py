"""VAD segmentation on synthetic signals: silence, espeak speech, long monologues, flushes;
and the voiced regions that word times are fitted to."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audio_fixtures import SAMPLE_RATE, audible_span, conversation, silence, speak
from parley.core.vad import CloseReason, SegmentClosed, SpeechStart, VadConfig, VadSegmenter
from parley.core.word_timing import WordTimingConfig, fit_words
from parley.core.words import TimedWord


def run(segmenter: VadSegmenter, audio: np.ndarray, chunk: int = 1600, flush=True):
    events = []
    for i in range(0, len(audio), chunk):
        events += segmenter.push(audio[i : i + chunk])
    if flush:
        events += segmenter.flush(CloseReason.END_OF_STREAM)
    return events


def closed(events):
    return [e for e in events if isinstance(e, SegmentClosed)]


@pytest.fixture(scope="module")
def three_turns():
    return conversation(
        [
            ("en-us", "The weather is nice today."),
            ("en-gb", "I agree, it is very sunny."),
            ("en-us", "Let us go for a walk then."),
        ],
        gap_s=1.0,
    )


def test_silence_and_low_noise_make_no_segment():
    """Digital silence and faint noise never open a segment."""
    rng = np.random.default_rng(0)
    audio = np.concatenate([silence(3), 0.001 * rng.standard_normal(3 * SAMPLE_RATE)])
    assert run(VadSegmenter(VadConfig()), audio.astype(np.float32)) == []


def test_each_turn_is_one_segment_around_its_speech(three_turns):
    """Three turns with one-second gaps make three segments that cover each turn."""
    audio, truth = three_turns
    events = run(VadSegmenter(VadConfig()), audio)
    segments = closed(events)
    assert [s.reason for s in segments] == [CloseReason.SILENCE] * 3
    for segment, turn in zip(segments, truth):
        assert segment.start <= turn.start + 0.1 and segment.end >= turn.end - 0.1
        assert segment.end - segment.start < turn.end - turn.start + 1.0
        assert len(segment.audio) == round((segment.end - segment.start) * SAMPLE_RATE)


def test_events_are_ordered_and_times_monotonic(three_turns):
    """Each segment opens with speech_started, ids count up, and times never go back."""
    audio, _ = three_turns
    events = run(VadSegmenter(VadConfig()), audio)
    assert all(isinstance(e, SpeechStart) == (i % 2 == 0) for i, e in enumerate(events))
    ids = [e.segment_id for e in events]
    assert ids == sorted(ids) and ids[::2] == list(range(len(ids) // 2))
    times = [t for e in closed(events) for t in (e.start, e.end)]
    assert times == sorted(times)


def test_chunk_size_does_not_change_segments(three_turns):
    """Feeding 7 samples or 1 s at a time gives the same segments."""
    audio, _ = three_turns
    small = [(s.start, s.end) for s in closed(run(VadSegmenter(VadConfig()), audio, chunk=7))]
    large = [(s.start, s.end) for s in closed(run(VadSegmenter(VadConfig()), audio, 16000))]
    assert small == large


def test_a_long_monologue_is_cut_and_nothing_is_lost():
    """Speech longer than max_segment_s is cut at max length, and the pieces are contiguous."""
    text = ("This is a long monologue without any pause that goes on and on, " * 4).strip()
    speech = speak(text)
    config = VadConfig(max_segment_s=4.0, min_silence_ms=600, speech_pad_ms=300)
    audio = np.concatenate([silence(0.5), speech, silence(1.0)])
    segments = closed(run(VadSegmenter(config), audio))
    assert len(segments) >= 3
    assert all(s.reason is CloseReason.MAX_LENGTH for s in segments[:-1])
    assert all(s.end - s.start <= 4.0 + 1e-9 for s in segments)
    for before, after in zip(segments, segments[1:]):
        if before.reason is CloseReason.MAX_LENGTH:
            assert after.start == before.end  # carried on, not dropped
    joined = np.concatenate([s.audio for s in segments[:-1]])
    start = round(segments[0].start * SAMPLE_RATE)
    np.testing.assert_array_equal(joined, audio[start : start + len(joined)])


def test_flush_closes_the_open_segment_with_every_sample():
    """finalize mid-speech closes the segment at the current stream time."""
    speech = speak("Finalize me right in the middle of this sentence please.")
    segmenter = VadSegmenter(VadConfig())
    half = len(speech) // 2 + 123  # not a whole number of frames
    events = run(segmenter, np.concatenate([silence(0.3), speech[:half]]), flush=False)
    assert segmenter.speaking and closed(events) == []
    flushed = segmenter.flush(CloseReason.FINALIZE)
    assert len(flushed) == 1 and flushed[0].reason is CloseReason.FINALIZE
    assert flushed[0].end == pytest.approx(segmenter.stream_time)
    assert segmenter.flush(CloseReason.FINALIZE) == []  # nothing open any more


def test_open_segment_grows_while_speaking():
    """The open segment (for partials) is a copy that grows with the speech."""
    speech = speak("A partial result is decoded from the open segment.")
    segmenter = VadSegmenter(VadConfig())
    assert segmenter.open_segment() is None
    run(segmenter, np.concatenate([silence(0.3), speech[:SAMPLE_RATE]]), flush=False)
    first = segmenter.open_segment()
    run(segmenter, speech[SAMPLE_RATE : 2 * SAMPLE_RATE], flush=False)
    second = segmenter.open_segment()
    assert first is not None and second is not None
    assert second.segment_id == first.segment_id and second.end > first.end
    np.testing.assert_array_equal(second.audio[: len(first.audio)], first.audio)


@pytest.mark.parametrize(
    "bad",
    [
        dict(aggressiveness=4),
        dict(frame_ms=25),
        dict(speech_pad_ms=900, min_silence_ms=300),
        dict(max_segment_s=40),
    ],
)
def test_inconsistent_settings_are_refused(bad):
    """Settings that cannot work are refused when built."""
    with pytest.raises(ValueError):
        VadConfig(**bad)


def test_voiced_regions_hold_the_speech_not_the_pad(three_turns):
    """Each segment knows which of its frames were voiced: one region per turn, inside
    the segment, starting after the pad and covering the audible speech."""
    audio, truth = three_turns
    for segment, turn in zip(closed(run(VadSegmenter(VadConfig()), audio)), truth):
        assert len(segment.voiced) == -(-len(segment.audio) // VadConfig().frame_samples)
        regions = segment.voiced_regions(bridge_s=0.3)
        assert len(regions) == 1
        start, end = (segment.start + t for t in regions[0])
        assert segment.start + 0.2 <= start <= turn.start + 0.1
        assert turn.end - 0.15 <= end <= segment.end - 0.2


def trimmed(speech):
    first, last = audible_span(speech)
    return speech[int(first * SAMPLE_RATE) : int(last * SAMPLE_RATE)]


def test_a_speaker_change_cut_splits_the_open_segment_without_losing_audio():
    """cut_at closes the open segment at the quietest frame near the time asked, and the
    speech goes on in the next segment, voiced flags and all."""
    turns = [
        speak("One speaker says this first part of it."),
        speak("And then another one answers.", "en-gb+f3"),
    ]
    speech = np.concatenate([trimmed(t) for t in turns])  # no pause between them
    audio = np.concatenate([silence(0.5), speech, silence(1.0)])
    segmenter = VadSegmenter(VadConfig())
    events = run(segmenter, audio[: int(4.5 * SAMPLE_RATE)], flush=False)
    assert segmenter.cut_at(99.0, search_s=0.2) == []  # not inside the open segment
    cut = segmenter.cut_at(2.5, search_s=0.2)
    assert [type(e) for e in cut] == [SegmentClosed, SpeechStart]
    first = cut[0]
    assert first.reason is CloseReason.SPEAKER_CHANGE and abs(first.end - 2.5) <= 0.2 + 0.03
    assert cut[1].start == first.end and segmenter.open_span()[0] == first.end
    events = cut + run(segmenter, audio[int(4.5 * SAMPLE_RATE) :])
    rest = closed(events)[1]
    joined = np.concatenate([first.audio, rest.audio])
    start = round(first.start * SAMPLE_RATE)
    np.testing.assert_array_equal(joined, audio[start : start + len(joined)])
    assert np.concatenate([first.voiced, rest.voiced]).sum() > 0.6 * len(speech) / (
        VadConfig().frame_samples
    )


@settings(max_examples=60, deadline=None)
@given(
    prefix_ms=st.integers(0, 3000),
    voiced_ms=st.integers(0, 1500),
    silence=st.integers(0, 5 * 16000 + 7),
)
def test_push_silence_is_pushing_zeros(prefix_ms, voiced_ms, silence):
    """``push_silence(n)`` gives the same events, stream time and later behaviour as
    ``push(np.zeros(n))``, from any state (speech open or not)."""
    rng = np.random.default_rng(prefix_ms * 7919 + voiced_ms)
    before = np.concatenate(
        [
            np.zeros(prefix_ms * 16, np.float32),
            (0.3 * rng.standard_normal(voiced_ms * 16)).astype(np.float32),
        ]
    )
    after = (0.3 * rng.standard_normal(8000)).astype(np.float32)
    runs = []
    for skip in (False, True):
        vad = VadSegmenter(VadConfig())
        events = vad.push(before)
        events += vad.push_silence(silence) if skip else vad.push(np.zeros(silence, np.float32))
        events += vad.push(after) + vad.flush(CloseReason.END_OF_STREAM)
        runs.append(([_shape(e) for e in events], vad.stream_time))
    assert runs[0] == runs[1]


def _shape(event):
    if isinstance(event, SegmentClosed):
        return (
            "closed",
            event.segment_id,
            event.start,
            event.end,
            event.reason,
            event.audio.tobytes(),
        )
    return ("start", event.segment_id, event.start)


def test_a_segments_speech_ends_with_its_last_voiced_frame():
    """Where its speech ended, in stream time: the end of its last voiced frame (the
    silence that closed it is after), or its end if no frame was voiced."""

    def closed(voiced: list[bool]) -> SegmentClosed:
        audio = np.zeros(len(voiced) * 480 - 100, np.float32)  # the last frame short
        return SegmentClosed(
            3, 10.0, 10.0 + len(audio) / SAMPLE_RATE, audio, CloseReason.SILENCE,
            np.array(voiced), 0.03,
        )  # fmt: skip

    assert closed([True, True, False, True, False, False]).speech_end == pytest.approx(10.12)
    assert closed([False, True, True]).speech_end == pytest.approx(10.0 + 1340 / SAMPLE_RATE)
    assert closed([False, False]).speech_end == pytest.approx(10.0 + 860 / SAMPLE_RATE)


def test_a_soft_first_word_is_in_its_segment():
    """A talker who starts softly: "Fine," 20 dB under the rest of the sentence.
    webrtcvad first hears the louder words; the pre-roll reaches back over the soft one,
    and the segment begins before it. Without the pre-roll the segment begins inside the
    word (bench/onsets.py measures this over real prompts and more openings)."""
    speech = speak("Fine, let us start the meeting.")
    onset, _ = audible_span(speech)
    first = int(onset * SAMPLE_RATE)
    speech[first : first + int(0.4 * SAMPLE_RATE)] *= 0.1
    lead = 1.5
    audio = np.concatenate([silence(lead), speech, silence(1.0)])

    def start(pad_ms: int) -> float:
        return closed(run(VadSegmenter(VadConfig(speech_pad_ms=pad_ms)), audio, chunk=640))[0].start

    assert start(300) <= lead + onset - 0.1
    assert start(0) > lead + onset + 0.03


def test_a_short_pause_inside_a_segment_ends_the_word_before_it():
    """espeak-ng speech with a 0.2 s pause: too short to close the VAD's segment or to be
    bridged over as a pause (0.3 s), long enough to part the regions words are fitted
    to. A word the aligner ran on into the pause ends where the voice stops (within a
    VAD frame), and the word it ran into starts where the voice comes back."""
    first, second = (trimmed(speak(text)) for text in ("I looked at the clock", "and left"))
    audio = np.concatenate([silence(0.5), first, silence(0.2), second, silence(1.0)])
    (segment,) = closed(run(VadSegmenter(VadConfig()), audio))
    stops = 0.5 + len(first) / SAMPLE_RATE - segment.start  # in the segment's time
    resumes = stops + 0.2
    words = [
        TimedWord(" the", stops - 0.5, stops - 0.35, 0.9),
        TimedWord(" clock", stops - 0.35, stops + 0.15, 0.9),
        TimedWord(" and", stops + 0.15, resumes + 0.2, 0.9),
    ]
    fitted = fit_words(words, segment.voiced_regions(WordTimingConfig().word_gap_s))
    assert abs(fitted[1].end - stops) <= 0.03, fitted
    assert abs(fitted[2].start - resumes) <= 0.03, fitted
    assert len(segment.voiced_regions(WordTimingConfig().bridge_s)) == 1  # one stretch
