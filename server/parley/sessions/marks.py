"""What a transport may queue among a session's messages (``Session.mark``), typed: a
mark comes back out of ``messages()`` after every message queued before it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Reply:
    """A wire's own message for its client, due once everything before it has gone out
    (an OpenAI commit's acknowledgement, Deepgram's UtteranceEnd): ``kind`` says which
    to the translator that queued it."""

    kind: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WebhookEvent:
    """An event a dialect adds to its session's webhooks, in its place among the
    results: a phone call's start, a key press."""

    kind: str
    data: dict[str, Any]


class Barrier:
    """A group's mark on its way through every track (``SessionGroup``): let out once all
    have passed it, so it follows everything the tracks had queued before it."""

    def __init__(self, mark: Mark, tracks: int):
        self.mark = mark
        self.waiting = tracks


MarkPayload = Reply | WebhookEvent | Barrier


@dataclass(frozen=True)
class Mark:
    """A payload queued with ``Session.mark``, and the stream time it was queued at."""

    payload: MarkPayload
    stream_time: float
