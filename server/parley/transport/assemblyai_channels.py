"""AssemblyAI's ``multichannel`` (protocol.md section 16): the transcripts of a file's
channels, each heard as a recording of its own, as the one transcript AssemblyAI answers
with, every speaker named by the channel it was heard on (pure).

A speaker is its channel's number ("2"), or with ``speaker_labels`` that number and the
speaker's letter within the channel ("2A"), as AssemblyAI labels them; a word's and an
utterance's ``channel`` is read back from that label.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from statistics import fmean

from parley.protocol.messages import Final
from parley.recordings.file_results import DecodeReport, FileTranscript
from parley.transport.assemblyai import speaker_letter


def channel_labelled(channels: Sequence[FileTranscript], diarize: bool) -> FileTranscript:
    """Each channel's recording (the first is channel 1) as one transcript in time order,
    every final's and word's speaker its channel ("2"), or with ``diarize`` its channel
    and the speaker's letter there ("2A"); segment ids renumbered, as the channels' own
    overlap. The language is the one most finals were heard in."""
    finals: list[tuple[Final, int]] = []
    for channel, result in enumerate(channels, start=1):
        for final in result.finals:
            label = _channel_speaker(channel, final.speaker, diarize)
            words = [
                replace(w, speaker=_channel_speaker(channel, w.speaker, diarize))
                for w in final.words
            ]
            finals.append((replace(final, speaker=label, words=words), final.segment_id))
    finals.sort(key=lambda item: (item[0].start, channel_of(item[0].speaker)))
    renumbered = tuple(replace(f, segment_id=i) for i, (f, _) in enumerate(finals))
    signs = {}
    for i, (final, was) in enumerate(finals):
        owner = channels[channel_of(final.speaker) - 1]
        if was in owner.signs:
            signs[i] = owner.signs[was]
    reports = [r.report for r in channels]
    languages = Counter(f.language for f, _ in finals if f.language)
    return FileTranscript(
        duration=max(r.duration for r in channels),
        finals=renumbered,
        speakers=tuple(dict.fromkeys(f.speaker for f in renumbered if f.speaker)),
        language=languages.most_common(1)[0][0] if languages else channels[0].language,
        report=DecodeReport(
            sum(r.windows for r in reports),
            sum(r.segments for r in reports),
            fmean(r.mean_batch_rows for r in reports),
            sum(r.draft_tokens for r in reports),
            sum(r.accepted_tokens for r in reports),
        ),
        signs=signs,
        processing_s=sum(r.processing_s for r in channels),
        queue_wait_s=channels[0].queue_wait_s,
    )


def _channel_speaker(channel: int, speaker: str | None, diarize: bool) -> str:
    letter = speaker_letter(speaker) if diarize else None
    return f"{channel}{letter or ''}"


def channel_of(label: str | None) -> int:
    """The channel a ``channel_labelled`` speaker is of: its leading digits."""
    digits = re.match(r"\d+", label or "")
    return int(digits.group()) if digits else 1
