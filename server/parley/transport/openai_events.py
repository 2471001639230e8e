"""The events of OpenAI's realtime transcription that Parley sends (protocol.md section
10): their shapes, apart from the translator's bookkeeping of items and ids."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from parley.protocol.messages import Error, ErrorCode, Word
from parley.transport.openai_answers import logprob_entries


def error_event(event_id: str, error: Error, client_event: object = None) -> dict:
    """OpenAI's ``error`` event for one of Parley's errors (``client_event``: the id of
    the client event it refuses, if any)."""
    kind = (
        "server_error"
        if error.code in (ErrorCode.INTERNAL_ERROR, ErrorCode.TRANSCRIPTION_FAILED)
        else "invalid_request_error"
    )
    return {
        "type": "error",
        "event_id": event_id,
        "error": {
            "type": kind,
            "code": error.code.value,
            "message": error.message,
            "param": None,
            "event_id": client_event,
        },
    }


def commit_empty(client_event: str | None) -> dict:
    """The error OpenAI sends for a commit of an empty buffer."""
    return {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "code": "input_audio_buffer_commit_empty",
            "message": "the input audio buffer holds no audio that is not committed yet",
            "param": None,
            "event_id": client_event,
        },
    }


@dataclass
class Item:
    """A conversation item: one turn of the input audio."""

    id: str
    texts: list[str] = field(default_factory=list)  # finals collected for a manual commit
    words: list[Word] = field(default_factory=list)  # and their words


def speech_stopped(item: Item, end: float) -> dict:
    """The server VAD's end of an item's speech, at stream time ``end``."""
    return {
        "type": "input_audio_buffer.speech_stopped",
        "audio_end_ms": round(end * 1000),
        "item_id": item.id,
    }


def transcript_events(
    item: Item, texts: list[str], seconds: float | None, words: Sequence[Word] | None = None
) -> list[dict]:
    """An item's transcript: a delta per final text, then ``completed`` with its usage
    (``seconds`` of audio, or, for a manual commit, token counts of nothing) and, given
    ``words``, their log probabilities (``include``)."""
    events = [
        {
            "type": "conversation.item.input_audio_transcription.delta",
            "item_id": item.id,
            "content_index": 0,
            "delta": text if k == 0 else " " + text,
        }
        for k, text in enumerate(texts)
    ]
    usage = (
        {"type": "duration", "seconds": round(seconds, 3)}
        if seconds is not None
        else {"type": "tokens", "input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    )
    events.append(
        {
            "type": "conversation.item.input_audio_transcription.completed",
            "item_id": item.id,
            "content_index": 0,
            "transcript": " ".join(texts),
            "usage": usage,
            **({"logprobs": logprob_entries(words)} if words is not None else {}),
        }
    )
    return events


def transcription_failed(item: Item, error: Error) -> dict:
    """The event saying an item's transcript could not be made."""
    return {
        "type": "conversation.item.input_audio_transcription.failed",
        "item_id": item.id,
        "content_index": 0,
        "error": {"type": "server_error", "code": error.code.value, "message": error.message},
    }
