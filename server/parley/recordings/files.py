"""Recordings: a whole file in, who said what out, in the same engine as the streams.

A job runs the same VAD over the whole recording, packs its segments into full
decoder windows (``core.packing``) and hands them all to the step scheduler as
background work (``recordings.window_decodes``): they become rows of the same
continuous batch as the live streams, behind every live final and partial, with
speculation or batching chosen per step by measured cost as for streams. Meanwhile,
with speakers asked for, the whole recording's speakers are clustered at once
(``core.recording_speakers``) on a thread of the lowest CPU priority, so live
diarization steps go first. Words keep their own times, and each final is one
speaker's part of one speech segment.

Jobs are bounded (``FileLimits.max_jobs``): one more is refused with ``Busy``, never
queued without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from parley.core.asr import Task
from parley.core.audio import SAMPLE_RATE, WHISPER_WINDOW_S
from parley.core.keyterms import check_keyterms
from parley.core.packing import pack
from parley.core.policy import IDLE, Priority
from parley.core.recording_speakers import RecordingClustering
from parley.core.redaction import parse_redact
from parley.core.replacements import check_replacements
from parley.core.speaker_count import SpeakerCount
from parley.core.speaker_names import KnownSpeaker
from parley.core.speaker_timeline import TimelineSnapshot, Turn
from parley.core.stream_diarizer import CLOSING_STEP_S, Heard, LiveFirst
from parley.core.vad import VadConfig
from parley.core.whole_recording import clustered_step_s
from parley.core.word_timing import WordTimingConfig
from parley.protocol.errors import ProtocolError
from parley.protocol.messages import StreamConfig
from parley.protocol.stream_config import language_tags
from parley.recordings.file_results import (
    DecodeReport,
    FileTranscript,
    finals_of,
    segment_recording,
)
from parley.recordings.progress import JobProgress, Progress
from parley.recordings.window_decodes import decode_windows
from parley.workers.decoding import StreamDecoding
from parley.workers.scheduler import AsrScheduler
from parley.workers.threads import in_passing_thread, lower_priority

if TYPE_CHECKING:
    from parley.core.stream_diarizer import DiarizationConfig


class RecordingSpeakers(Protocol):
    """Who spoke when in a whole recording (``models.speaker_models.SpeakerModels``)."""

    def diarize_recording(
        self,
        audio: np.ndarray,
        config: DiarizationConfig,
        clustering: RecordingClustering,
        count: SpeakerCount,
        step_s: float,
        on_heard: Heard | None = None,
        live_first: LiveFirst | None = None,
    ) -> TimelineSnapshot:
        """Who spoke when in a whole recording (``SpeakerModels.diarize_recording``)."""

    def name_voices(
        self, audio: np.ndarray, turns: Sequence[Turn], known: Sequence[KnownSpeaker]
    ) -> dict[int, str]:
        """Speaker → name, for the voices that match a known speaker's clip."""


log = logging.getLogger(__name__)
WINDOW_MARGIN_S = 1.0  # a packed window leaves this much of the decoder's 30 s free
# A window of a recording's speaker work waits at most this long for the live streams'
# steps to be done: as often as their steps never stop, it gets about a tenth of a core
# (a window is some 60 ms here), about what the lowest nice value got beside theirs.
LIVE_FIRST_WAIT_S = 0.5
# Of the speakers' progress, the windows' share: the clustering and naming after them
# are the rest, and tell only that they are done.
HEARING_SHARE = 0.95


@dataclass(frozen=True)
class FileLimits:
    """Bounds on recordings: how many at once, how big, how long."""

    max_jobs: int = 2  # recordings transcribed at once; one more gets Busy
    max_bytes: int = 200 << 20  # an upload's size
    max_receiving: int = 8  # uploads arriving at once, each up to max_bytes of disk
    max_seconds: float = 4 * 3600.0  # a recording's duration
    windows_in_flight: int = 8  # a job's windows queued or decoding at once
    # A recording's diarization windows are this far apart (at least: clustered_step_s),
    # as a stream's windows kept for its closing relabel are: bench/devset.py's
    # recordings score a lower DER so than 2.5 s apart, in more time (bench/VARIANTS.md,
    # "Windows 1 s apart").
    diarization_step_s: float = CLOSING_STEP_S
    # The longest pause kept between two pieces packed in one window (``core.packing``):
    # without it a sentence's last word was placed in the next piece (bench/VARIANTS.md,
    # "Silence between a window's pieces").
    piece_gap_s: float = 1.0


@dataclass(frozen=True)
class FileRequest:
    """What a caller asks of one recording besides its audio."""

    language: str | None = None
    diarize: bool = False
    speakers: SpeakerCount = SpeakerCount()
    prompt: str = ""  # text the model reads first, given to every window
    task: Task = Task.TRANSCRIBE
    keyterms: tuple[str, ...] = ()  # names and terms the decoder favours
    redact: tuple[str, ...] = ()  # Redact categories
    numerals: bool = False
    replace: tuple[str, ...] = ()  # find:replacement, made in every result
    filler_words: bool = False  # "um" and "uh" written
    profanity_filter: bool = False  # profane words masked
    dictation: bool = False  # spoken punctuation written as marks
    known_speakers: tuple[KnownSpeaker, ...] = ()  # their voices labelled with their names
    languages: tuple[str, ...] = ()  # detection among these (none: any)

    @property
    def config(self) -> StreamConfig:
        """The same decoding settings as a stream's (ValueError past their bounds)."""
        try:
            languages = language_tags(self.languages, "languages")
        except ProtocolError as exc:
            raise ValueError(exc.message) from None
        return StreamConfig(
            language=self.language,
            languages=languages,
            task=self.task,
            keyterms=check_keyterms(self.keyterms),
            prompt=self.prompt or None,
            redact=tuple(sorted(r.value for r in parse_redact(self.redact))),
            numerals=self.numerals,
            replace=check_replacements(self.replace),
            filler_words=self.filler_words,
            profanity_filter=self.profanity_filter,
            dictation=self.dictation,
        )


class Busy(Exception):
    """Every job slot is taken; try again after ``retry_after_s``."""

    def __init__(self, retry_after_s: int):
        super().__init__(f"{retry_after_s}")
        self.retry_after_s = retry_after_s


class Draining(Exception):
    """The server is draining and takes no new recordings."""


@dataclass
class FileJobs:
    """The recordings being transcribed now (at most ``limits.max_jobs``)."""

    worker: AsrScheduler
    vad: VadConfig
    limits: FileLimits = FileLimits()
    speaker_models: RecordingSpeakers | None = None  # the diarization worker's models, if any
    diarization_config: DiarizationConfig | None = None
    clustering: RecordingClustering = RecordingClustering()
    word_timing: WordTimingConfig = WordTimingConfig()
    max_window_s: float = WHISPER_WINDOW_S
    observe: Callable[[str, float], None] | None = None  # (outcome, audio seconds)
    # The live streams' diarization worker's ``wait_quiet``, with speakers on.
    live_quiet: Callable[[float], None] | None = None
    # The live speaker threads' priority (``diarization.nice``), which a recording's
    # speaker work shares (after their due steps): under IDLE it runs only on an idle
    # core, at a nice value a host busy with other work still gets it done.
    speaker_priority: Priority = IDLE
    _running: set[asyncio.Task] = field(default_factory=set)
    _draining: bool = False

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def can_diarize(self) -> bool:
        return self.speaker_models is not None

    def retry_after_s(self) -> int:
        """Seconds a refused upload is told to wait (``Retry-After``)."""
        return 5

    def has_room(self) -> bool:
        """Whether a job could start now."""
        return not self._draining and len(self._running) < self.limits.max_jobs

    async def next_end(self) -> None:
        """Wait until one of the running jobs ends (at once when none runs): a queued
        job's next chance at a slot."""
        if self._running:
            await asyncio.wait(set(self._running), return_when=asyncio.FIRST_COMPLETED)

    @contextlib.contextmanager
    def slot(self):
        """Hold one job slot for the current task (Busy, or Draining, if none)."""
        if self._draining:
            raise Draining()
        if len(self._running) >= self.limits.max_jobs:
            raise Busy(self.retry_after_s())
        task = asyncio.current_task()
        assert task is not None
        self._running.add(task)
        try:
            yield
        finally:
            self._running.discard(task)

    async def drain(self, timeout_s: float) -> None:
        """Take no new job; let running ones finish for ``timeout_s``, then cancel them
        (their callers answer with an error)."""
        self._draining = True
        if self._running:
            log.info("draining %d recording(s), for at most %g s", len(self._running), timeout_s)
            await asyncio.wait(set(self._running), timeout=timeout_s)
        for task in list(self._running):
            task.cancel()

    async def transcribe(
        self,
        audio: np.ndarray,
        request: FileRequest,
        on_progress: Callable[[float], None] | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> FileTranscript:
        """Transcribe a whole 16 kHz recording (hold a ``slot()`` around it);
        ``on_progress`` is told the fraction done (``JobProgress``: of the windows decoded
        and, with speakers, of the recording their windows have heard), ``on_text`` each
        window's text in order as soon as it and those before it are done (speakers come only
        with the whole transcript)."""
        began = time.perf_counter()
        pieces, reasons = await asyncio.to_thread(
            segment_recording, audio, self.vad, self.word_timing.word_gap_s
        )
        windows = pack(pieces, self.max_window_s - WINDOW_MARGIN_S, self.limits.piece_gap_s)
        stats = self.worker.stats
        steps_before, rows_before = stats.steps, stats.rows_stepped
        speakers = None
        job = JobProgress(on_progress, 2 if request.diarize else 1)
        if request.diarize:
            if self.speaker_models is None:
                raise RuntimeError("this server has diarization off")
            speakers = asyncio.ensure_future(
                in_passing_thread(
                    self._diarize, audio, request.speakers, request.known_speakers, job.part(1)
                )
            )
        decoding = StreamDecoding.of(request.config, self.worker.engine)
        try:
            progress = Progress(len(windows), on_change=job.part(0))
            results, waited = await decode_windows(
                self.worker,
                self.limits.windows_in_flight,
                audio,
                windows,
                decoding,
                progress,
                on_text,
            )
            snapshot, names = await speakers if speakers is not None else (None, {})
        finally:
            if speakers is not None and not speakers.done():
                speakers.cancel()
        steps = stats.steps - steps_before
        rows_per_step = (stats.rows_stepped - rows_before) / steps if steps else 0.0
        report = DecodeReport.of(results, len(pieces), rows_per_step)
        finals, signs = finals_of(
            results,
            reasons,
            snapshot,
            self.word_timing,
            decoding,
            names,
        )
        labels = tuple(dict.fromkeys(f.speaker for f in finals if f.speaker))
        heard = Counter(f.language for f in finals if f.language)
        language = request.language or (heard.most_common(1)[0][0] if heard else None)
        transcript = FileTranscript(
            len(audio) / SAMPLE_RATE,
            tuple(finals),
            labels,
            language,
            report,
            signs,
            time.perf_counter() - began,
            waited,
        )
        log.info(
            "transcribed a recording of %.1f s in %.2f s: %d windows, %d segments, %d speakers",
            transcript.duration,
            transcript.processing_s,
            len(windows),
            len(pieces),
            len(labels),
        )
        return transcript

    def _diarize(
        self,
        audio: np.ndarray,
        count: SpeakerCount,
        known: Sequence[KnownSpeaker],
        on_heard: Heard | None,
    ) -> tuple[TimelineSnapshot, dict[int, str]]:
        """Who spoke when, and the names of the known speakers' voices; on a passing
        thread at the live speaker threads' CPU priority, each window after the live
        streams' steps due: live diarization comes first. ``on_heard`` is told how much
        of the recording is heard, and 1 once all is done."""
        from parley.models.device import set_threads

        lower_priority(self.speaker_priority)
        set_threads(1)
        quiet = self.live_quiet
        live_first = None if quiet is None else lambda: quiet(LIVE_FIRST_WAIT_S)
        # Only asked of a server with speakers, which has both.
        assert self.speaker_models is not None and self.diarization_config is not None
        step_s = clustered_step_s(len(audio) / SAMPLE_RATE, self.limits.diarization_step_s)
        heard = None if on_heard is None else lambda share: on_heard(HEARING_SHARE * share)
        snapshot = self.speaker_models.diarize_recording(
            audio, self.diarization_config, self.clustering, count, step_s, heard, live_first
        )
        names = self.speaker_models.name_voices(audio, snapshot.turns, known) if known else {}
        if on_heard is not None:  # clustered and named (a hub pipeline tells only this)
            on_heard(1.0)
        return snapshot, names
