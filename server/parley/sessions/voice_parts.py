"""A final whose segment holds more than one voice, decoded one voice at a time.

Whisper given two voices back to back in one segment can write one of them and drop
the other whole: two dialogue lines said without a pause by 42 pairs of espeak-ng
voices, decoded by tiny.en through the scheduler, lost a whole line in 4 pairs (WER
0.146); decoded a voice at a time, WER 0.129, at 1.5 times the decoding time
(bench/voice_parts.py). A segment left uncut where its speaker changed
(the change found too late to cut, ``TurnConfig.max_cut_age_s``) is therefore split
there, each part decoded as a request of its own, and the parts' results joined into
one: one final, holding each voice's words, sent when the segment's own final would be.

Changes still too young to have cut when a pause closed a segment are not split at:
measured (bench/diarization.py, real time), splitting there too raised sample.wav's WER
from 0.230 to 0.241 and its DER from 0.074 to 0.078, and the 3-voice meeting after it
from 0.276 to 0.303.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from parley.core.asr import AsrRequest, DecodeStats, Transcription
from parley.core.audio import SAMPLE_RATE
from parley.core.vad import SegmentClosed, quietest_cut

if TYPE_CHECKING:
    from parley.sessions.speaker_track import SpeakerTrack
    from parley.workers.scheduler import AsrScheduler

MIN_PART_S = 1.0  # a part shorter than this is not decoded alone (too little to read)


async def submit_by_voice(
    worker: AsrScheduler,
    request: AsrRequest,
    segment: SegmentClosed,
    speakers: SpeakerTrack | None,
    realtime: bool,
) -> concurrent.futures.Future:
    """Queue the final of ``segment`` (``request`` decodes all of it): one request, or
    one a voice where ``speakers`` heard it change; the future of the (joined) result."""
    if speakers is None or not (changes := speakers.changes_in(segment.start, segment.end)):
        return await worker.submit_final(request, realtime)
    parts = voice_parts(segment, changes, speakers.cut_search_s)
    return await submit_parts(worker, request, parts, realtime)


async def submit_parts(
    worker: AsrScheduler,
    request: AsrRequest,
    parts: Sequence[tuple[int, np.ndarray]],
    realtime: bool,
) -> concurrent.futures.Future:
    """Queue ``request`` as it is (fewer than two ``parts``), or one request a part of
    its audio (``voice_parts``); the future of the joined result."""
    if len(parts) < 2:
        return await worker.submit_final(request, realtime)
    futures = []
    for first, audio in parts:  # a partial's draft is of the segment's beginning
        part = replace(request, audio=audio, draft=None if first else request.draft)
        futures.append(await worker.submit_final(part, realtime))
    return gathered(futures, [first / SAMPLE_RATE for first, _ in parts])


def voice_parts(
    segment: SegmentClosed, changes: Sequence[float], search_s: float
) -> list[tuple[int, np.ndarray]]:
    """``(first sample, audio)`` of each part of ``segment`` to decode alone: split at
    each change (stream time), at the quietest frame within ``search_s`` of it, as the
    VAD cuts at a change; a change leaving a part under ``MIN_PART_S`` is passed over."""
    frame = round(segment.frame_s * SAMPLE_RATE)
    frames = len(segment.audio) // frame
    reach = max(1, round(search_s / segment.frame_s))
    min_part = round(MIN_PART_S * SAMPLE_RATE)
    starts = [0]
    for change in sorted(changes):
        at = round((change - segment.start) / segment.frame_s)
        first, last = max(1, at - reach), min(frames - 1, at + reach + 1)
        if first >= last:
            continue
        cut = quietest_cut(segment.audio, frame, first, last)
        if cut - starts[-1] >= min_part and len(segment.audio) - cut >= min_part:
            starts.append(cut)
    ends = starts[1:] + [len(segment.audio)]
    return [(a, segment.audio[a:b]) for a, b in zip(starts, ends)]


def joined(parts: Sequence[tuple[float, Transcription]]) -> Transcription:
    """One result of parts decoded apart (each with its start in seconds from the
    segment's): their texts and tokens in order, word times from the segment start,
    the decode's signs over the parts that kept their text."""
    if len(parts) == 1:
        return parts[0][1]
    kept = [(offset, r) for offset, r in parts if not r.rejected] or list(parts[:1])
    tokens = [len(r.tokens) for _, r in kept]
    first = kept[0][1]
    stats = DecodeStats()
    for _, r in parts:
        for name in ("passes", "drafted", "accepted", "verify_steps"):
            setattr(stats, name, getattr(stats, name) + getattr(r.stats, name))
    return replace(
        first,
        text=" ".join(r.text for _, r in kept if r.text),
        tokens=tuple(t for _, r in kept for t in r.tokens),
        words=tuple(
            replace(w, start=w.start + offset, end=w.end + offset)
            for offset, r in kept
            for w in r.words
        ),
        no_speech_prob=min(r.no_speech_prob for _, r in kept),
        avg_logprob=float(np.average([r.avg_logprob for _, r in kept], weights=tokens))
        if sum(tokens)
        else first.avg_logprob,
        stats=stats,
        compression_ratio=max(r.compression_ratio for _, r in kept),
        foreign=all(r.foreign for _, r in kept),
        window_too_short=False,
    )


def gathered(
    futures: Sequence[concurrent.futures.Future], offsets: Sequence[float]
) -> concurrent.futures.Future:
    """A future of the parts' ``joined`` result, once every part's future is done: it
    fails as the first failed part does, and cancelling it cancels every part."""
    if len(futures) == 1:
        return futures[0]
    out: concurrent.futures.Future = concurrent.futures.Future()
    lock = threading.Lock()
    left = [len(futures)]

    def part_done(_: concurrent.futures.Future) -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        if out.done():
            return
        if any(f.cancelled() for f in futures):
            out.cancel()
            return
        failed = next((f.exception() for f in futures if f.exception() is not None), None)
        try:  # ``out`` may have been cancelled since it was checked
            if failed is not None:
                out.set_exception(failed)
            else:
                out.set_result(joined([(o, f.result()) for o, f in zip(offsets, futures)]))
        except concurrent.futures.InvalidStateError:
            pass

    def out_done(_: concurrent.futures.Future) -> None:
        if out.cancelled():
            for future in futures:
                future.cancel()

    out.add_done_callback(out_done)
    for future in futures:
        future.add_done_callback(part_done)
    return out
