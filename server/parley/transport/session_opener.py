"""An admitted connection's session: its dialect's translator, over the stream it builds
(and a resume token where the wire resumes), told to its sinks and the log; and, at its
end, the same told again."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from parley.sessions.session_group import SessionGroup
from parley.sessions.streams import AsrService, Stream, StreamFactory
from parley.transport.admission import StreamLimits
from parley.transport.dialect import Dialect, Opened, Setup
from parley.transport.session_loop import Served
from parley.transport.sinks import SessionClosed, SessionOpened, SessionSinks, SinkFactory

log = logging.getLogger(__name__)


class SessionOpener:
    """Shared by every session of the endpoint (no per-session state)."""

    def __init__(
        self,
        asr: AsrService,
        streams: StreamFactory,
        limits: StreamLimits,
        sinks: Sequence[SinkFactory],
        register_resumable: Callable[[str, str], str],
        server_name: str | None,
    ):
        self._asr = asr
        self._streams = streams
        self._limits = limits
        self._sinks = sinks
        self._register_resumable = register_resumable
        self._server_name = server_name

    def open(self, this: Served, dialect: Dialect[Any], setup: Setup[Any]) -> Stream:
        """The session, with ``this`` given its translator, resume token and sinks."""
        if dialect.resumable and self._limits.resume_window_s > 0:
            this.resume_token = self._register_resumable(this.key, this.session_id)
        this.translator = dialect.translator(
            Opened(
                this.session_id,
                setup,
                self._asr.model_label,
                self._limits.to_json(),
                self._asr.check_decoding,
                self._server_name,
                this.resume_token,
                self._asr.languages,
            ),
            self._streams,
        )
        log.info(
            "session %s started by key %s on %s: %s",
            this.session_id,
            this.key,
            dialect.path,
            setup.config,
            extra={"session_id": this.session_id, "key": this.key},
        )
        stream = this.translator.stream
        opened = SessionOpened(
            this.session_id,
            this.key,
            dialect.path,
            setup.config,
            self._asr.model_label,
            setup.webhook_url,
            stream.track_of if isinstance(stream, SessionGroup) else None,
        )
        this.sinks = SessionSinks(self._sinks, opened)
        return stream

    def closed(self, this: Served, session: Stream) -> None:
        """The session's end: it is closed, and its sinks and the log are told."""
        session.close()
        audio_s = round(session.stream_time, 3)
        if this.sinks is not None:
            this.sinks.closed(SessionClosed(this.outcome, audio_s, tuple(this.error_codes)))
        log.info(
            "session %s ended: %s after %.1f s of audio (key %s, errors %s)",
            this.session_id,
            this.outcome,
            audio_s,
            this.key,
            ",".join(this.error_codes) or "none",
            extra={
                "session_id": this.session_id,
                "key": this.key,
                "outcome": this.outcome,
                "audio_s": audio_s,
                "error_codes": this.error_codes,
            },
        )
