"""Server messages told differently: at a later time (a track that starts late in a
meeting), or as said by one speaker (a phone line, a participant). Pure."""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from parley.protocol.messages import Final, Finalized, Partial, SegmentEnded, SpeechStarted

M = TypeVar("M")


def shifted(message: M, offset_s: float) -> M:
    """The message with its times ``offset_s`` later (others as they are)."""
    if isinstance(message, SpeechStarted):
        return replace(message, start=message.start + offset_s)
    if isinstance(message, Partial):
        return replace(message, start=message.start + offset_s, end=message.end + offset_s)
    if isinstance(message, Final):
        return replace(
            message,
            start=message.start + offset_s,
            end=message.end + offset_s,
            words=[
                replace(w, start=w.start + offset_s, end=w.end + offset_s) for w in message.words
            ],
        )
    if isinstance(message, Finalized):
        return replace(message, audio_end=message.audio_end + offset_s)
    if isinstance(message, SegmentEnded):
        return replace(message, end=message.end + offset_s)
    return message


def with_speaker(message: M, speaker: str) -> M:
    """A final or partial (and its words) said by ``speaker``; others as they are."""
    if isinstance(message, Final):
        return replace(
            message, speaker=speaker, words=[replace(w, speaker=speaker) for w in message.words]
        )
    if isinstance(message, Partial):
        return replace(message, speaker=speaker)
    return message
