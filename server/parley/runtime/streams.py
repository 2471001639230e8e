"""What a transport may ask of the runtime: the ASR handle and the factory of streams.

The composition root (``parley.service``) builds both and hands them to the transport,
which so never constructs a ``Session``, a ``SessionGroup`` or a ``SpeakerTrack`` itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from parley.core.asr import Decoding
from parley.core.vad import VadConfig
from parley.protocol.stream_config import StreamConfig
from parley.runtime.diarization import DiarizationWorker
from parley.runtime.scheduler import AsrScheduler
from parley.runtime.session import Session, SessionOptions
from parley.runtime.session_group import SessionGroup
from parley.runtime.speaker_track import SpeakerTrack

# What a wire drives: one session, or one per track of the connection (a meeting's
# participants, a phone call's two directions).
Stream = Session | SessionGroup


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

    def __call__(self, config: StreamConfig, vad: VadConfig | None, tracks: bool) -> Stream:
        """One session (labelled by the diarization worker when ``config`` asks for speakers
        and the server has one), or, for ``tracks``, a group that makes one per track;
        ``vad``: the connection's own turn detection, None for the server's."""
        options = self.options if vad is None else replace(self.options, vad=vad)
        if tracks:
            return SessionGroup(
                config,
                lambda track_config, speaker, offset_s: Session(
                    track_config, self.worker, options, speaker=speaker, offset_s=offset_s
                ),
            )
        speakers = (
            SpeakerTrack(self.diarization)
            if config.diarization and self.diarization is not None
            else None
        )
        return Session(config, self.worker, options, speakers)
