"""The server's own file pipeline in this process, without a server: `parley transcribe`,
and ``Parley`` for scripts and notebooks.

``LocalPipeline`` loads the models once and transcribes any number of recordings on
them, as a server's file endpoints do. `parley transcribe` decodes its first file before
any model loads, so a file that is no audio is told at once, not after the models'
seconds of loading, and gives out each file's transcript as soon as it is done, so that
one failing later loses none of those before it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from tqdm import tqdm

from parley.client.captions import SUBTITLES, CaptionStyle
from parley.config import Settings
from parley.core.asr import Task
from parley.core.speaker_count import SpeakerCount
from parley.core.speaker_names import KnownSpeaker, check_known_speakers, check_reference
from parley.loading import load_asr, load_diarization
from parley.recordings.file_results import FileTranscript
from parley.recordings.files import FileJobs, FileRequest
from parley.recordings.media import UndecodableAudio, decode_file, decode_reference
from parley.service import file_jobs
from parley.sessions.streams import AsrService
from parley.transport.file_answers import rendered
from parley.workers.diarization import DiarizationWorker
from parley.workers.scheduler import AsrScheduler
from parley.workers.threads import in_passing_thread

Result = TypeVar("Result")


def local_settings(
    model: str | None = None,
    diarization: str = "off",
    models_dir: str | Path | None = None,
    compute_type: str | None = None,
) -> Settings:
    """``parley serve``'s settings (the PARLEY_* environment) with these in-process
    choices over them, where given (ValueError where they are not valid)."""
    asr = {"model": model, "compute_type": compute_type}
    fields: dict[str, Any] = {
        "asr": {name: value for name, value in asr.items() if value},
        "diarization": {"source": diarization},
    }
    if models_dir:
        fields["models_dir"] = Path(models_dir)
    return Settings(**fields)


class LocalPipeline:
    """The file pipeline on models loaded in this process: ``start``, then ``transcribe``
    each recording, then ``stop``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._worker: AsrScheduler | None = None
        self._asr: AsrService | None = None
        self._diarization: DiarizationWorker | None = None
        self._jobs: FileJobs | None = None

    @property
    def diarizes(self) -> bool:
        """Whether recordings get speaker labels (``settings.diarization.source``)."""
        return self._diarization is not None

    async def start(self) -> None:
        """Load the models and start their threads."""
        worker, self._asr = await in_passing_thread(load_asr, self.settings)
        self._worker = worker  # kept before the speaker models load, so that stop() stops it
        self._diarization = await in_passing_thread(load_diarization, self.settings)
        # No warm-up: its timings size live encoder batches and admission, and a
        # recording's windows take one encoder pass each and learn the step costs as they go.
        await worker.start(warm_up=False)
        if self._diarization is not None:
            self._diarization.start()
        self._jobs = file_jobs(self.settings, worker, self._diarization)

    async def stop(self) -> None:
        """Stop the model threads (a pipeline never started stops at once)."""
        if self._worker is not None:
            await self._worker.stop()
        if self._diarization is not None:
            await self._diarization.stop()
        self._jobs = None

    async def transcribe(
        self,
        audio: np.ndarray,
        request: FileRequest,
        on_progress: Callable[[float], None] | None = None,
    ) -> FileTranscript:
        """One 16 kHz mono recording (ValueError where the model cannot do the request's
        language or task; RuntimeError before ``start``)."""
        if self._jobs is None or self._asr is None:
            raise RuntimeError("the pipeline is not started")
        self._asr.check_language(request.language)
        with self._jobs.slot():
            return await self._jobs.transcribe(audio, request, on_progress=on_progress)


async def transcribe_locally(
    settings: Settings,
    sources: list[str],
    fmt: str,
    language: str | None,
    num_speakers: int | None,
    emit: Callable[[str], None],
    decoding: dict | None = None,
    known: Sequence[tuple[str, Path]] = (),
    style: CaptionStyle = SUBTITLES,
) -> None:
    """Each file in ``fmt`` (text, json, srt, vtt, rttm), a progress bar per file, given
    to ``emit`` in order; ``decoding``: FileRequest's decoding fields (keyterms, prompt,
    task, redact, …); ``known``: (name, clip) of voices to label by name; ``style``: the
    subtitles' cues."""
    if known and settings.diarization.source == "off":
        raise ValueError("known speakers name speakers: add --diarization bundle")
    known_speakers = tuple(
        [KnownSpeaker(name, await decode_reference(clip, name)) for name, clip in known]
    )
    first = await _decoded(sources[0], settings.files.max_duration_s)
    pipeline = LocalPipeline(settings)
    try:
        await pipeline.start()
        if fmt == "rttm" and not pipeline.diarizes:
            raise ValueError("rttm writes speaker turns: add --diarization bundle")
        request = FileRequest(
            language,
            pipeline.diarizes,
            SpeakerCount(num_speakers),
            known_speakers=known_speakers,
            **(decoding or {}),
        )
        for index, source in enumerate(sources):
            audio = first if index == 0 else await _decoded(source, settings.files.max_duration_s)
            with tqdm(total=100, desc=Path(source).name, unit="%", leave=False) as bar:

                def advance(fraction: float, bar=bar) -> None:
                    bar.update(round(100 * fraction) - bar.n)

                result = await pipeline.transcribe(audio, request, on_progress=advance)
            emit(rendered(result, fmt, Path(source).stem, style))
    finally:
        await pipeline.stop()


async def _decoded(source: str, max_s: float) -> np.ndarray:
    try:
        return await decode_file(Path(source), max_s)
    except UndecodableAudio as exc:  # which of the files, for the command line
        raise UndecodableAudio(f"{source}: {exc}") from exc


Audio = str | Path | np.ndarray  # a file ffmpeg reads, or 16 kHz mono samples in [-1, 1]


class Parley:
    """Parley's file pipeline in a script or a notebook, with no server::

        with Parley(diarization="bundle") as parley:
            result = parley.transcribe("meeting.wav", num_speakers=2)
        print(result.text)
        for turn in result.transcript().turns():
            print(turn.speaker, turn.start, turn.end)

    The models load once, on ``with`` (or ``start()``), and every ``transcribe`` is one
    recording, transcribed as the server's file endpoints transcribe it. Settings are
    ``parley serve``'s: the PARLEY_* environment, then these arguments. The pipeline runs
    on an event loop of its own thread, so a caller whose thread already runs one (a
    Jupyter notebook) may call it too."""

    def __init__(
        self,
        model: str | None = None,
        diarization: str = "off",
        models_dir: str | Path | None = None,
        compute_type: str | None = None,
    ) -> None:
        self._pipeline = LocalPipeline(local_settings(model, diarization, models_dir, compute_type))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Load the models (once; ``close`` stops them)."""
        if self._loop is not None:
            return
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="parley-local", daemon=True
        )
        self._thread.start()
        try:
            self._run(self._pipeline.start())
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop the models' threads and the loop; it cannot be used after."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            self._run(self._pipeline.stop())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()
            self._loop = self._thread = None

    def __enter__(self) -> Parley:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def transcribe(
        self,
        audio: Audio,
        *,
        language: str | None = None,
        num_speakers: int | None = None,
        min_speakers: int | None = None,
        max_speakers: int | None = None,
        known_speakers: Mapping[str, Audio] | None = None,
        task: str = "transcribe",
        prompt: str = "",
        keyterms: Sequence[str] = (),
        languages: Sequence[str] = (),
        redact: Sequence[str] = (),
        replace: Sequence[str] = (),
        numerals: bool = False,
        filler_words: bool = False,
        profanity_filter: bool = False,
        dictation: bool = False,
        on_progress: Callable[[float], None] | None = None,
    ) -> FileTranscript:
        """One recording: its finals (``.finals``: text, words with times, speakers,
        language), ``.text``, ``.speakers``, ``.language``, ``.duration``, and
        ``.transcript()`` for turns and the client's formats. The options are the file
        endpoints' (protocol.md, sections 3a and 16); speaker counts and
        ``known_speakers`` (name → a 2 to 10 s clip of the voice) need ``diarization``.
        ValueError for an option out of bounds or audio that is not mono samples,
        UndecodableAudio for a file ffmpeg cannot read, AudioTooLong past
        ``files.max_duration_s``; RuntimeError before ``start`` or after ``close``."""
        request = FileRequest(
            language,
            self._pipeline.diarizes,
            SpeakerCount(num_speakers, min_speakers or 1, max_speakers),
            prompt=prompt,
            task=Task(task),
            keyterms=tuple(keyterms),
            redact=tuple(redact),
            numerals=numerals,
            replace=tuple(replace),
            filler_words=filler_words,
            profanity_filter=profanity_filter,
            dictation=dictation,
            languages=tuple(languages),
        )
        _ = request.config  # ValueError past the options' bounds, before any audio is read
        if not self._pipeline.diarizes and (known_speakers or request.speakers != SpeakerCount()):
            raise ValueError("speaker counts and known speakers need diarization='bundle'")
        check_known_speakers(list(known_speakers or {}), len(known_speakers or {}))
        return self._run(self._transcribe(audio, request, known_speakers or {}, on_progress))

    async def _transcribe(
        self,
        audio: Audio,
        request: FileRequest,
        known: Mapping[str, Audio],
        on_progress: Callable[[float], None] | None,
    ) -> FileTranscript:
        samples = await self._samples(audio)
        voices = []
        for name, clip in known.items():
            if isinstance(clip, np.ndarray):
                check_reference(name, _mono(clip))
                voices.append(KnownSpeaker(name, _mono(clip)))
            else:
                voices.append(KnownSpeaker(name, await decode_reference(Path(clip), name)))
        request = replace(request, known_speakers=tuple(voices))
        return await self._pipeline.transcribe(samples, request, on_progress)

    async def _samples(self, audio: Audio) -> np.ndarray:
        if isinstance(audio, np.ndarray):
            return _mono(audio)
        return await decode_file(Path(audio), self._pipeline.settings.files.max_duration_s)

    def _run(self, job: Coroutine[Any, Any, Result]) -> Result:
        if self._loop is None:
            job.close()
            raise RuntimeError("the pipeline is not started: use `with Parley(...)`")
        return asyncio.run_coroutine_threadsafe(job, self._loop).result()


def _mono(audio: np.ndarray) -> np.ndarray:
    """16 kHz mono samples as float32 (ValueError for anything but one channel of them)."""
    if audio.ndim != 1 or not np.issubdtype(audio.dtype, np.floating):
        raise ValueError("audio samples are one channel of floats in [-1, 1], at 16 kHz")
    return np.ascontiguousarray(audio, dtype=np.float32)
