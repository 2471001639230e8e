"""A final whose segment holds more than one voice, decoded again a voice at a time
when decoding it whole dropped one.

Whisper given two voices back to back in one segment can write one of them and drop
the other whole: two dialogue lines said without a pause by 42 pairs of espeak-ng
voices, decoded by tiny.en through the scheduler, lost a whole line in 4 pairs
(bench/voice_parts.py). Decoding each voice alone keeps both lines, but on real
conversation it reads worse than the whole segment, which gives each voice the
other's context: sample.wav with every change left uncut read WER 0.149 decoded whole
and 0.184 a voice at a time. So a segment left uncut where its speaker changed (the
change found too late to cut, ``TurnConfig.max_cut_age_s``) is decoded whole first;
if a voice's part of it then holds almost no words (fewer than ``LOST_WORDS_PER_S``
a voiced second: a dropped line leaves 0.3 to 0.6, a read one 2 or more), it is decoded
again split at the changes, one request a part, and the parts' results joined into the
segment's one final.

Changes still too young to have cut when a pause closed a segment are not looked at:
splitting there too raised sample.wav's WER from 0.230 to 0.241 (bench/diarization.py,
real time).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Sequence
from dataclasses import fields, replace
from typing import TYPE_CHECKING

import numpy as np

from parley.core.asr import AsrRequest, DecodeStats, Transcription
from parley.core.audio import SAMPLE_RATE
from parley.core.vad import SegmentClosed, quietest_cut

if TYPE_CHECKING:
    from parley.sessions.speaker_track import SpeakerTrack
    from parley.workers.scheduler import AsrScheduler

log = logging.getLogger(__name__)

MIN_PART_S = 1.0  # a part shorter than this is not decoded alone (too little to read)
LOST_WORDS_PER_S = 1.0  # fewer words a voiced second in a voice's part: it was dropped


async def submit_by_voice(
    worker: AsrScheduler,
    request: AsrRequest,
    segment: SegmentClosed,
    speakers: SpeakerTrack | None,
    realtime: bool,
) -> concurrent.futures.Future:
    """Queue the final of ``segment`` (``request`` decodes all of it), to be decoded
    again a voice at a time if it holds a change ``speakers`` left uncut and decoding it
    whole dropped a voice; the future of the result."""
    if speakers is None or not (changes := speakers.changes_in(segment.start, segment.end)):
        return await worker.submit_final(request, realtime)
    parts = voice_parts(segment, changes, speakers.cut_search_s)
    return await decode_by_voice(worker, request, segment, parts, realtime)


async def decode_by_voice(
    worker: AsrScheduler,
    request: AsrRequest,
    segment: SegmentClosed,
    parts: Sequence[tuple[int, np.ndarray]],
    realtime: bool,
) -> concurrent.futures.Future:
    """``request`` (all of ``segment``) queued now (waiting for room, as any final
    does); its result, or, where it dropped a voice (``dropped_voice``), the ``parts``
    decoded apart and joined."""
    whole = await worker.submit_final(request, realtime)
    if len(parts) < 2:
        return whole

    async def settle() -> Transcription:
        result = await asyncio.wrap_future(whole)
        if not dropped_voice(result, segment, parts):
            return result
        log.info(
            "segment %d: a voice was dropped; decoding it a voice at a time", segment.segment_id
        )
        return await decode_parts(worker, request, parts, realtime)

    # asyncio's own bridge to a concurrent future: its result or failure passes on, and
    # cancelling it cancels the task (and so the parts' decodes).
    return asyncio.run_coroutine_threadsafe(settle(), asyncio.get_running_loop())


def dropped_voice(
    result: Transcription, segment: SegmentClosed, parts: Sequence[tuple[int, np.ndarray]]
) -> bool:
    """Whether ``result`` (``segment`` decoded whole) left a part with at least
    MIN_PART_S of voiced audio holding fewer than LOST_WORDS_PER_S words (by their
    middles) a voiced second. A result the quality guards rejected is left as it is, and
    so is a segment of one part."""
    if result.rejected or len(parts) < 2:
        return False
    frame = round(segment.frame_s * SAMPLE_RATE)
    for first, audio in parts:
        start, end = first / SAMPLE_RATE, (first + len(audio)) / SAMPLE_RATE
        voiced = float(segment.voiced[first // frame : (first + len(audio)) // frame].sum())
        voiced *= segment.frame_s
        if voiced < MIN_PART_S:
            continue
        words = sum(1 for w in result.words if start <= (w.start + w.end) / 2 < end)
        if words < LOST_WORDS_PER_S * voiced:
            return True
    return False


async def decode_parts(
    worker: AsrScheduler,
    request: AsrRequest,
    parts: Sequence[tuple[int, np.ndarray]],
    realtime: bool,
) -> Transcription:
    """``request`` decoded as one request a part of its audio (``voice_parts``), the
    results joined. It fails as the first part that fails does, and cancelled, or
    failed, it cancels the parts' decodes still going."""
    decodes: list[asyncio.Future] = []
    try:
        for first, audio in parts:  # a partial's draft is of the segment's beginning
            part = replace(request, audio=audio, draft=None if first else request.draft)
            decodes.append(asyncio.wrap_future(await worker.submit_final(part, realtime)))
        results = await asyncio.gather(*decodes)
    except BaseException:
        for decode in decodes:
            decode.cancel()
        raise
    return joined([(first / SAMPLE_RATE, r) for (first, _), r in zip(parts, results)])


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
    stats = DecodeStats(
        **{f.name: sum(getattr(r.stats, f.name) for _, r in parts) for f in fields(DecodeStats)}
    )
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
        temperature=max(r.temperature for _, r in kept),
    )
