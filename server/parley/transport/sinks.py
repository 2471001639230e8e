"""Where a session's messages go besides its own client: followers, webhooks, metrics.

Each is a ``SinkFactory`` shared by the server, which opens one ``SessionSink`` per
session (so no session's state lives on a shared object). The endpoint tells a
session's sinks three things: that it opened, each message it produced (whether or not
a client is connected to read it), and how it ended; it knows nothing of what they do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from parley.protocol.messages import (
    Error,
    Final,
    Partial,
    ServerMessage,
    SpeakerUpdate,
    StreamConfig,
    as_json,
)
from parley.runtime.metrics import Metrics
from parley.runtime.webhooks import WebhookFeed, WebhookSender
from parley.sessions.marks import Mark, WebhookEvent
from parley.transport.followers import Followers


@dataclass(frozen=True)
class SessionOpened:
    """An admitted session, as its sinks are told of it."""

    session_id: str
    key: str  # the API key's name (who may follow it)
    path: str  # the wire it came on
    config: StreamConfig
    model: str
    webhook_url: str | None = None  # its own webhook target, if it named one
    # A connection of several tracks (a call's two directions, a meeting's participants,
    # a multichannel stream's channels): the track a segment is of, told with its
    # messages so that webhooks and followers can tell the tracks apart.
    track_of: Callable[[int], str | None] | None = None

    def track(self, message: ServerMessage) -> str | None:
        """The track ``message`` is of; None on a connection of one track."""
        segment_id = getattr(message, "segment_id", None)
        if self.track_of is None or not isinstance(segment_id, int):
            return None
        return self.track_of(segment_id)


@dataclass(frozen=True)
class SessionClosed:
    """How a session ended: ``outcome`` is ``ended``, an error code, or ``disconnected``."""

    outcome: str
    audio_duration: float
    error_codes: tuple[str, ...]


class SessionSink(Protocol):
    """One session's view of a destination for its messages (never waits)."""

    def message(self, message: ServerMessage | Mark) -> None:
        """One of the session's messages (or marks), in stream order, as it is made."""
        ...

    def closed(self, summary: SessionClosed) -> None:
        """The session ended: how, after how much audio, with which errors."""
        ...


class SinkFactory(Protocol):
    """A destination shared by every session; ``open`` gives one session's sink, or None
    when this session has nothing to send there."""

    def open(self, session: SessionOpened) -> SessionSink | None:
        """The session's sink here, or None when it has nothing to send here."""
        ...


class SessionSinks:
    """All of one session's sinks, told in the order the server lists them."""

    def __init__(self, factories: Sequence[SinkFactory], session: SessionOpened):
        self._sinks = [sink for f in factories if (sink := f.open(session)) is not None]

    def message(self, message: ServerMessage | Mark) -> None:
        """Tell every sink one message."""
        for sink in self._sinks:
            sink.message(message)

    def closed(self, summary: SessionClosed) -> None:
        """Tell every sink the session ended."""
        for sink in self._sinks:
            sink.closed(summary)


# ---------------------------------------------------------------- followers


@dataclass(frozen=True)
class FollowerSinks:
    """Live sessions that others may follow (protocol.md section 14)."""

    followers: Followers

    def open(self, session: SessionOpened) -> SessionSink:
        """Register the session for ``/v1/sessions/{id}/events`` followers, and pass its
        messages to them."""
        self.followers.opened(session.session_id, session.key)
        return _FollowerSink(self.followers, session)


@dataclass(frozen=True)
class _FollowerSink:
    followers: Followers
    session: SessionOpened

    @property
    def session_id(self) -> str:
        return self.session.session_id

    def message(self, message: ServerMessage | Mark) -> None:
        if not isinstance(message, Mark):  # marks are the session's own bookkeeping
            self.followers.publish(self.session_id, message, self.session.track(message))

    def closed(self, summary: SessionClosed) -> None:
        self.followers.closed(self.session_id)


# ---------------------------------------------------------------- webhooks


@dataclass(frozen=True)
class WebhookSinks:
    """Each session's lifecycle and results, POSTed in order (protocol.md section 12)."""

    sender: WebhookSender

    def open(self, session: SessionOpened) -> SessionSink | None:
        """The session's webhook feed, opened with ``session.started``; None when
        neither the session nor the server names a target."""
        feed = self.sender.feed(session.session_id, session.webhook_url)
        if feed is None:
            return None
        feed.publish(
            "session.started",
            {"path": session.path, "config": session.config.to_json(), "model": session.model},
        )
        return _WebhookSink(feed, session)


@dataclass(frozen=True)
class _WebhookSink:
    feed: WebhookFeed
    session: SessionOpened

    def message(self, message: ServerMessage | Mark) -> None:
        if isinstance(message, Final):
            track = self.session.track(message)
            final = as_json(message)
            self.feed.publish(
                "transcript.final", final if track is None else {**final, "track": track}
            )
        elif isinstance(message, SpeakerUpdate):
            self.feed.publish("transcript.speaker_update", as_json(message))
        elif isinstance(message, Mark) and isinstance(message.payload, WebhookEvent):
            self.feed.publish(message.payload.kind, message.payload.data)

    def closed(self, summary: SessionClosed) -> None:
        self.feed.publish(
            "session.ended",
            {
                "outcome": summary.outcome,
                "audio_duration": summary.audio_duration,
                "error_codes": list(summary.error_codes),
            },
        )
        self.feed.close()


# ---------------------------------------------------------------- metrics


@dataclass(frozen=True)
class MetricsSinks:
    """Counts of finals, partials, errors and sessions by outcome (``/metrics``)."""

    metrics: Metrics

    def open(self, session: SessionOpened) -> SessionSink:
        """Count the session's messages in the metrics."""
        return _MetricsSink(self.metrics)


@dataclass(frozen=True)
class _MetricsSink:
    metrics: Metrics

    def message(self, message: ServerMessage | Mark) -> None:
        if isinstance(message, Error):
            self.metrics.errors.labels(message.code.value).inc()
        elif isinstance(message, Final):
            self.metrics.finals.inc()
        elif isinstance(message, Partial):
            self.metrics.partials.inc()

    def closed(self, summary: SessionClosed) -> None:
        self.metrics.sessions.labels(summary.outcome).inc()
