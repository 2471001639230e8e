"""`parley transcribe` without a server: the server's own file pipeline, in-process.

The first file is decoded before any model loads, so a file that is no audio is told
at once, not after the models' seconds of loading; each file's transcript is given out
as soon as it is done, so that one failing later loses none of those before it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from parley.client.captions import SUBTITLES, CaptionStyle
from parley.config import Settings
from parley.core.speaker_count import SpeakerCount
from parley.core.speaker_names import KnownSpeaker
from parley.loading import load_asr, load_diarization
from parley.recordings.files import FileRequest
from parley.recordings.media import UndecodableAudio, decode_file, decode_reference
from parley.service import file_jobs
from parley.transport.file_answers import rendered
from parley.workers.threads import in_passing_thread


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
    worker, asr = await in_passing_thread(load_asr, settings)
    diarization = await in_passing_thread(load_diarization, settings)
    if fmt == "rttm" and diarization is None:
        raise ValueError("rttm writes speaker turns: add --diarization bundle")
    # No warm-up: its timings size live encoder batches and admission, and a
    # recording's windows take one encoder pass each and learn the step costs as they go.
    await worker.start(warm_up=False)
    if diarization is not None:
        diarization.start()
    jobs = file_jobs(settings, worker, diarization)
    request = FileRequest(
        language,
        diarization is not None,
        SpeakerCount(num_speakers),
        known_speakers=known_speakers,
        **(decoding or {}),
    )
    try:
        asr.check_language(language)
        for index, source in enumerate(sources):
            audio = first if index == 0 else await _decoded(source, settings.files.max_duration_s)
            with tqdm(total=100, desc=Path(source).name, unit="%", leave=False) as bar:

                def advance(fraction: float, bar=bar) -> None:
                    bar.update(round(100 * fraction) - bar.n)

                with jobs.slot():
                    result = await jobs.transcribe(audio, request, on_progress=advance)
            emit(rendered(result, fmt, Path(source).stem, style))
    finally:
        await worker.stop()
        if diarization is not None:
            await diarization.stop()


async def _decoded(source: str, max_s: float) -> np.ndarray:
    try:
        return await decode_file(Path(source), max_s)
    except UndecodableAudio as exc:  # which of the files, for the command line
        raise UndecodableAudio(f"{source}: {exc}") from exc
