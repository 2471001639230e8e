"""A final whose segment holds two voices, decoded a voice at a time: where the segment
splits, how the parts' results join, and how their futures make one."""

from __future__ import annotations

import asyncio
import concurrent.futures

import numpy as np
import pytest

from audio_fixtures import SPEAKERS, audible_span, speak, words_of
from parley.core.asr import AsrRequest, DecodeStats, Transcription
from parley.core.audio import SAMPLE_RATE
from parley.core.vad import CloseReason, SegmentClosed
from parley.core.words import TimedWord
from parley.sessions.voice_parts import (
    MIN_PART_S,
    decode_by_voice,
    decode_parts,
    dropped_voice,
    joined,
    voice_parts,
)
from parley.workers.scheduler import AsrScheduler

FRAME_S = 0.03


def trimmed(speech: np.ndarray) -> np.ndarray:
    start, end = audible_span(speech)
    return speech[int(start * SAMPLE_RATE) : int(end * SAMPLE_RATE)]


def segment(seconds: float, quiet_at: float, start: float = 10.0) -> SegmentClosed:
    """A loud segment starting at stream time ``start``, quiet for one frame at
    ``quiet_at`` seconds into it."""
    audio = np.full(int(seconds * SAMPLE_RATE), 0.5, np.float32)
    audio[::2] = -0.5
    frame = int(FRAME_S * SAMPLE_RATE)
    quiet = int(quiet_at / FRAME_S) * frame
    audio[quiet : quiet + frame] = 0.0
    voiced = np.ones(len(audio) // frame, bool)
    return SegmentClosed(0, start, start + seconds, audio, CloseReason.SILENCE, voiced, FRAME_S)


def test_a_segment_splits_at_the_quietest_frame_near_each_change():
    """Changes at 2.0 s into a 5 s segment (the quiet frame 0.12 s after it) split it
    just after that frame; a change leaving under MIN_PART_S alone is passed over."""
    seg = segment(5.0, quiet_at=2.1)
    parts = voice_parts(seg, [seg.start + 2.0], search_s=0.25)
    assert [len(a) for _, a in parts] == [int(2.13 * SAMPLE_RATE), len(seg.audio) - 34080]
    assert parts[1][0] == int(2.13 * SAMPLE_RATE)
    assert np.array_equal(np.concatenate([a for _, a in parts]), seg.audio)
    too_near_the_end = seg.end - MIN_PART_S / 2
    assert len(voice_parts(seg, [too_near_the_end], search_s=0.25)) == 1
    assert len(voice_parts(seg, [seg.start + 0.3], search_s=0.25)) == 1
    assert len(voice_parts(seg, [seg.start + 20.0], search_s=0.25)) == 1  # outside it


def result(text: str, words: list[tuple[str, float, float]], rejected: str | None = None):
    return Transcription(
        text=text,
        tokens=tuple(range(len(text.split()))),
        words=tuple(TimedWord(w, a, b, 0.9) for w, a, b in words),
        avg_logprob=-0.2,
        rejected=rejected,
        stats=DecodeStats(passes=len(words)),
        language="en",
    )


def test_parts_join_into_one_result_with_times_from_the_segment_start():
    first = result("Did you get it?", [("Did", 0.1, 0.3), ("it?", 0.5, 0.9)])
    second = result("Yes, I did.", [("Yes,", 0.0, 0.4), ("did.", 0.6, 1.0)])
    out = joined([(0.0, first), (2.13, second)])
    assert out.text == "Did you get it? Yes, I did."
    assert [(w.word, w.start) for w in out.words] == [
        ("Did", 0.1),
        ("it?", 0.5),
        ("Yes,", pytest.approx(2.13)),
        ("did.", pytest.approx(2.73)),
    ]
    assert out.tokens == first.tokens + second.tokens
    assert out.stats.passes == 4
    silent = result("", [], rejected="no_speech")
    assert joined([(0.0, silent), (2.0, second)]).text == "Yes, I did."
    assert joined([(0.0, first)]) is first


class HandedOut:
    """The scheduler's seam (``submit_final``), handing out futures the test settles."""

    def __init__(self):
        self.futures: list[concurrent.futures.Future] = []

    async def submit_final(self, request, realtime=False):
        self.futures.append(concurrent.futures.Future())
        return self.futures[-1]


async def test_the_parts_decodes_make_one_that_fails_or_cancels_as_they_do():
    seg = segment(5.0, quiet_at=2.1)
    parts = [(0, seg.audio[:32000]), (32000, seg.audio[32000:])]  # the second at 2.0 s
    request = AsrRequest(seg.audio, with_words=True, draft=(1, 2))
    worker = HandedOut()
    both = asyncio.ensure_future(decode_parts(worker, request, parts, False))
    await asyncio.sleep(0)
    assert len(worker.futures) == 2
    worker.futures[1].set_result(result("two", [("two", 0.0, 0.3)]))
    await asyncio.sleep(0)
    assert not both.done()
    worker.futures[0].set_result(result("one", [("one", 0.0, 0.3)]))
    joined_result = await both
    assert joined_result.text == "one two"
    assert joined_result.words[1].start == pytest.approx(2.0)

    failing = HandedOut()
    failed = asyncio.ensure_future(decode_parts(failing, request, parts, False))
    await asyncio.sleep(0)
    failing.futures[0].set_exception(RuntimeError("engine failed"))
    with pytest.raises(RuntimeError, match="engine failed"):
        await failed
    assert failing.futures[1].cancelled()  # the other part's decode is not left running

    waiting = HandedOut()
    cancelled = await decode_by_voice(waiting, request, seg, parts, False)
    assert cancelled.cancel()
    for _ in range(10):  # the cancel reaches the decode through the loop, a step at a time
        await asyncio.sleep(0)
    assert waiting.futures and all(f.cancelled() for f in waiting.futures)


def test_a_voice_is_dropped_when_its_part_holds_almost_no_words():
    """Fewer than LOST_WORDS_PER_S words a voiced second in a part of at least MIN_PART_S
    voiced: dropped. A short part, or a result the guards rejected, is not judged."""
    seg = segment(5.0, quiet_at=2.1)
    parts = voice_parts(seg, [seg.start + 2.0], search_s=0.25)  # split at 2.13 s
    said = [("One", 0.2, 0.5), ("two", 0.6, 0.9), ("three", 1.0, 1.4), ("four", 1.5, 1.9)]
    both = said + [("five", 2.4, 2.8), ("six", 3.0, 3.4), ("seven", 3.5, 4.0)]
    assert not dropped_voice(result("…", both), seg, parts)
    assert dropped_voice(result("…", said + [("five", 2.4, 2.8)]), seg, parts)  # 1 in 2.87 s
    assert dropped_voice(result("", []), seg, parts)
    assert not dropped_voice(result("", [], rejected="no_speech"), seg, parts)
    assert not dropped_voice(result("…", said), seg, voice_parts(seg, [], search_s=0.25))


async def test_two_voices_in_one_segment_decoded_again_keep_both_lines(tiny_engine):
    """Real tiny.en through the real scheduler: two voices back to back in one segment.
    Decoded whole (over a short or a whole window) tiny.en writes only the first line;
    seeing the second voice's part without words, the server decodes it again a voice at
    a time and gives both lines, the second's words timed after the change."""
    first, second = (
        trimmed(speak(text, voice))
        for text, voice in (
            ("I see. Then we should plan those trips together next week.", "en-gb-x-rp"),
            ("Thank you all for coming today.", SPEAKERS["B"]),
        )
    )
    pad = np.zeros(int(0.3 * SAMPLE_RATE), np.float32)
    audio = np.concatenate([pad, first, second, pad])
    voiced = np.ones(-(-len(audio) // int(FRAME_S * SAMPLE_RATE)), bool)
    seg = SegmentClosed(
        3, 5.0, 5.0 + len(audio) / SAMPLE_RATE, audio, CloseReason.SILENCE, voiced, FRAME_S
    )
    change = seg.start + (len(pad) + len(first)) / SAMPLE_RATE
    parts = voice_parts(seg, [change], search_s=0.25)
    assert len(parts) == 2
    scheduler = AsrScheduler(tiny_engine, capacity=4)
    await scheduler.start()
    try:
        request = AsrRequest(audio, with_words=True)
        whole = await asyncio.wrap_future(await scheduler.submit_final(request, False))
        chosen = await asyncio.wrap_future(
            await decode_by_voice(scheduler, request, seg, parts, False)
        )
    finally:
        await scheduler.stop()
    assert dropped_voice(whole, seg, parts)
    heard = words_of(chosen.text)
    assert {"plan", "trips", "week"} <= set(heard) and {"coming", "today"} <= set(heard)
    assert heard.index("week") < heard.index("today")
    today = next(w for w in chosen.words if "today" in w.word.lower())
    assert today.start > change - seg.start
    assert not dropped_voice(chosen, seg, parts)
