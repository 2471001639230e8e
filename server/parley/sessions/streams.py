"""What a transport may ask of the runtime: the ASR handle and the factory of streams.

The composition root (``parley.service``) builds both and hands them to the transport,
which so never constructs a ``Session``, a ``SessionGroup`` or a ``SpeakerTrack`` itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Protocol

from parley.core.asr import Decoding
from parley.core.vad import VadConfig
from parley.protocol.messages import EndReason, Error, ServerMessage
from parley.protocol.stream_config import StreamConfig
from parley.sessions.marks import Mark
from parley.sessions.session import Session
from parley.sessions.session_group import SessionGroup
from parley.sessions.session_options import SessionOptions
from parley.sessions.speaker_track import SpeakerTrack
from parley.workers.diarization import DiarizationWorker
from parley.workers.scheduler import AsrScheduler


class Stream(Protocol):
    """What the endpoint serves, whichever a wire drives: one ``Session``, or a
    ``SessionGroup`` with one per track of the connection (a meeting's participants, a
    phone call's two directions)."""

    @property
    def config(self) -> StreamConfig:
        """The connection's settings (a group's tracks may each differ)."""
        ...

    @property
    def stream_time(self) -> float:
        """Audio received, in seconds."""
        ...

    @property
    def counted_streams(self) -> int:
        """What the connection counts for in the live load."""
        ...

    async def report(self, error: Error) -> None:
        """A non-fatal error, sent in stream order with the results."""

    async def end(self, reason: EndReason = EndReason.END_OF_STREAM) -> None:
        """Finalize what was received, then ``session_ended`` for ``reason``."""

    def close(self) -> None:
        """Release the stream's work (the connection is done with)."""

    def messages(self) -> AsyncIterator[ServerMessage | Mark]:
        """Server messages (and marks) in stream order, until ``session_ended``."""
        ...


@dataclass(frozen=True)
class AsrService:
    """What the transport may know of ASR: the worker, a label, the model's languages and
    the check of what a stream asks of it."""

    worker: AsrScheduler
    model_label: str

    def check_language(self, language: str | None) -> None:
        """ValueError when the model cannot transcribe ``language``."""
        self.check_decoding(Decoding(language=language))

    @property
    def languages(self) -> tuple[str, ...]:
        """The languages the model transcribes, sorted."""
        return tuple(sorted(self.worker.engine.languages))

    def check_decoding(self, decoding: Decoding) -> None:
        """ValueError when the model cannot do what ``decoding`` asks."""
        self.worker.engine.check_decoding(decoding)


@dataclass(frozen=True)
class StreamFactory:
    """Builds each admitted connection's stream over the shared workers (it holds no
    per-session state: every call makes new objects)."""

    worker: AsrScheduler
    options: SessionOptions
    diarization: DiarizationWorker | None = None

    def tracks(self, config: StreamConfig, vad: VadConfig | None) -> SessionGroup:
        """A group that makes one session per track; ``vad``: the connection's own turn
        detection, None for the server's."""
        options = self._options(vad)
        return SessionGroup(
            config,
            lambda track_config, speaker, offset_s: Session(
                track_config, self.worker, options, speaker=speaker, offset_s=offset_s
            ),
        )

    def channels(self, config: StreamConfig, vad: VadConfig | None) -> SessionGroup:
        """A group that makes one session per channel of a connection's audio, each as
        ``single`` makes it (labelled by the diarization worker when ``config`` asks)."""
        return SessionGroup(config, lambda track_config, _, __: self.single(track_config, vad))

    def single(self, config: StreamConfig, vad: VadConfig | None) -> Session:
        """One session, labelled by the diarization worker when ``config`` asks for
        speakers and the server has one; ``vad`` as for ``tracks``."""
        options = self._options(vad)
        speakers = (
            SpeakerTrack(self.diarization, options.word_timing, config.speaker_count)
            if config.diarization and self.diarization is not None
            else None
        )
        return Session(config, self.worker, options, speakers)

    def _options(self, vad: VadConfig | None) -> SessionOptions:
        return self.options if vad is None else replace(self.options, vad=vad)
