"""Recordings sent whole: Parley's file pipeline against the reference handler's way and
faster-whisper, on this machine's CPU, in one run, as ratios.

The recordings are 1, 5 and 20 minutes of held-out speech with known text:
bench/devset.py's held-out espeak-ng meetings (2 to 6 voices, with their overlaps and
short turns) and sample.wav (real voices), laid end to end until the length is
reached. Each system transcribes each recording, English, greedy, all cores:

- **parley**: ``FileJobs`` in-process, the server's own pipeline (VAD, 29 s windows,
  the step scheduler; speakers off, as for the others);
- **(a) transformers**: ``pipeline("automatic-speech-recognition", chunk_length_s=30,
  batch_size=8)`` on the same imported weights, the reference handler's way;
- **(b) faster-whisper**: ``WhisperModel`` (sequential, no VAD) and
  ``BatchedInferencePipeline`` (batch 8, its Silero VAD), fp32 and int8, on the
  CTranslate2 files the bundle is imported from.

Reports audio seconds per second (x real time), each system's ratio to Parley on the
same recording, and WER (Whisper's English normaliser). Usage:
python bench/files.py [--models tiny.en base] [--minutes 1 5 20] [--skip-slow]
(--skip-slow leaves (a) out of recordings over 5 minutes for models other than tiny.en)
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import numpy as np
from audio_fixtures import SAMPLE_WAV, read_wav, sample_reference_text, wer
from common import print_table, write_json
from devset import PLAN, SAMPLE_RATE, make

BATCH = 8


def recording(minutes: float) -> tuple[np.ndarray, str]:
    """Held-out meetings and sample.wav, end to end, to at least ``minutes``; their text."""
    pieces: list[tuple[np.ndarray, str]] = [(read_wav(SAMPLE_WAV), sample_reference_text())]
    for (kind, speakers), count in PLAN["heldout"].items():
        if kind in ("espeak", "one voice"):
            for index in range(count):
                meeting = make("heldout", kind, speakers, index)
                pieces.append((meeting.audio, " ".join(t for t in meeting.text if t)))
    audio, text, k = [], [], 0
    while sum(len(a) for a in audio) < minutes * 60 * SAMPLE_RATE:
        piece, said = pieces[k % len(pieces)]
        audio += [piece, np.zeros(SAMPLE_RATE // 2, np.float32)]
        text.append(said)
        k += 1
    return np.concatenate(audio), " ".join(text)  # whole pieces: a little over the length


async def parley_run(model: str, audios: dict[float, np.ndarray]) -> dict[float, tuple]:
    from parley.app import load_asr
    from parley.config import Settings
    from parley.runtime.files import FileRequest
    from parley.service import file_jobs
    from parley.runtime.threads import in_passing_thread

    settings = Settings(asr={"model": model})
    worker, _ = await in_passing_thread(load_asr, settings)
    await worker.start(warm_up=True)
    jobs = file_jobs(settings, worker, None)
    out = {}
    try:
        for minutes, audio in audios.items():
            began = time.perf_counter()
            with jobs.slot():
                result = await jobs.transcribe(audio, FileRequest(language="en"))
            out[minutes] = (time.perf_counter() - began, result.text, result.report.to_json())
    finally:
        await worker.stop()
    return out


def transformers_run(model_dir: Path, audio: np.ndarray, multilingual: bool) -> tuple:
    import torch
    from transformers import pipeline

    asr = pipeline("automatic-speech-recognition", model=str(model_dir), device="cpu",
                   dtype=torch.float32)
    kwargs = {"generate_kwargs": {"language": "en", "task": "transcribe"}} if multilingual \
        else {}
    began = time.perf_counter()
    text = asr({"raw": audio, "sampling_rate": SAMPLE_RATE}, chunk_length_s=30,
               batch_size=BATCH, **kwargs)["text"]
    return time.perf_counter() - began, text


def faster_whisper_run(ct2_dir: Path, audio: np.ndarray, compute_type: str,
                       batched: bool) -> tuple:
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    model = WhisperModel(str(ct2_dir), device="cpu", compute_type=compute_type, cpu_threads=2)
    began = time.perf_counter()
    if batched:
        segments, _ = BatchedInferencePipeline(model).transcribe(
            audio, batch_size=BATCH, beam_size=1, language="en")
    else:
        segments, _ = model.transcribe(audio, beam_size=1, language="en",
                                       condition_on_previous_text=False)
    text = " ".join(s.text.strip() for s in segments)
    return time.perf_counter() - began, text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["tiny.en", "base"])
    parser.add_argument("--minutes", nargs="+", type=float, default=[1, 5, 20])
    parser.add_argument("--skip-slow", action="store_true")
    args = parser.parse_args()
    from parley.config import Settings
    from parley.models.bundle import ct2_source

    models_dir = Settings().models_dir
    made = {m: recording(m) for m in args.minutes}
    audios = {m: a for m, (a, _) in made.items()}
    rows = []
    for model in args.models:
        ct2 = ct2_source(model, Path(tempfile.gettempdir()) / f"parley-ct2-{model}")
        ours = asyncio.run(parley_run(model, audios))
        for minutes, (audio, said) in made.items():
            seconds = len(audio) / SAMPLE_RATE
            spent, text, report = ours[minutes]
            results = [("parley", spent, text)]
            if not (args.skip_slow and model != "tiny.en" and minutes > 5):
                results.append(("(a) transformers pipeline batch 8",
                                *transformers_run(models_dir / model, audio,
                                                  not model.endswith(".en"))))
            for compute in ("float32", "int8"):
                results.append((f"(b) faster-whisper sequential {compute}",
                                *faster_whisper_run(ct2, audio, compute, batched=False)))
                results.append((f"(b) faster-whisper batched 8 {compute}",
                                *faster_whisper_run(ct2, audio, compute, batched=True)))
            for system, took, hypothesis in results:
                rows.append({"model": model, "minutes": minutes, "system": system,
                             "seconds": took, "x_real_time": seconds / took,
                             "x_parley": spent / took, "wer": wer(said, hypothesis)})
            rows[-len(results)]["decode"] = report
            print_table(rows[-len(results):], ["model", "minutes", "system", "seconds",
                                               "x_real_time", "x_parley", "wer"])
    print()
    print_table(rows, ["model", "minutes", "system", "seconds", "x_real_time", "x_parley",
                       "wer"])
    print(f"wrote {write_json('files', {'rows': rows})}")


if __name__ == "__main__":
    main()
