"""Recordings sent whole: Parley's file pipeline against the reference handler's way and
faster-whisper, on this machine's CPU, in one run, as ratios.

The recordings are 1, 5 and 20 minutes of speech with known text: sample.wav (two
real voices) and bench/devset.py's held-out sentences spoken by espeak-ng in four
plain voices, in turns, laid end to end until the length is reached. Each system
transcribes each recording, English, greedy, all cores:

- **parley**: ``FileJobs`` in-process, the server's own pipeline (VAD, 29 s windows,
  the step scheduler; speakers off, as for the others), in the default precision
  (``auto``: bfloat16 on a CPU with AMX, else float32), and in the others: float32,
  int8, and bfloat16 where the CPU has bfloat16 matrix instructions (``amx_bf16`` or
  ``avx512_bf16``);
- **(a) transformers**: ``pipeline("automatic-speech-recognition", chunk_length_s=30,
  batch_size=8)`` on the same imported weights, the reference handler's way;
- **(b) faster-whisper**: ``WhisperModel`` (sequential, no VAD) and
  ``BatchedInferencePipeline`` (batch 8, its Silero VAD), fp32 and int8, on the
  CTranslate2 files the bundle is imported from.

Reports audio seconds per second (x real time), each system's ratio to Parley on the
same recording, and WER (Whisper's English normaliser). Usage:
python bench/files.py [--models tiny.en base] [--minutes 1 5 20] [--reference-minutes 5]
  [--recordings N]
  [--parley-windows N … | --parley-compute TYPE … | --parley-gap S …] (Parley's variants only)
((a) runs at about 3 times real time here: only on recordings up to --reference-minutes)
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from common import print_table, write_json  # first: it puts tests/ on the path

import numpy as np

from audio_fixtures import SAMPLE_WAV, conversation, read_wav, sample_reference_text, wer
from devset import SAMPLE_RATE, SENTENCES
from parley.models.device import has_bfloat16_matrices

if TYPE_CHECKING:
    from parley.workers.scheduler import AsrScheduler

BATCH = 8
Key = TypeVar("Key", bound=Hashable)


VOICES = ("en-us", "en-us+f3", "en-gb", "en-us+m3")


def recording(minutes: float, first_round: int = 0) -> tuple[np.ndarray, str]:
    """sample.wav (two real voices) and espeak-ng talk of the held-out sentences in four
    plain voices, in turns, end to end, to at least ``minutes``; and the text said. Each
    round is sample.wav and eight sentences (about a minute); ``first_round`` picks where
    the sentences begin, so that recordings of one length differ."""
    real = (read_wav(SAMPLE_WAV), sample_reference_text())
    sentences = SENTENCES["heldout"]
    audio: list[np.ndarray] = []
    text: list[str] = []
    k = first_round
    while sum(len(a) for a in audio) < minutes * 60 * SAMPLE_RATE:
        lines = [
            (VOICES[(k + i) % len(VOICES)], sentences[(k * 7 + i) % len(sentences)])
            for i in range(8)
        ]
        talk, truth = conversation(lines, gap_s=0.6)
        audio += [real[0], talk]
        text += [real[1], " ".join(u.text for u in truth)]
        k += 1
    return np.concatenate(audio), " ".join(text)  # whole pieces: a little over the length


async def parley_run(
    model: str,
    audios: dict[Key, np.ndarray],
    windows_in_flight: int | None = None,
    compute_type: str = "auto",
    piece_gap_s: float | None = None,
    on_worker: Callable[[AsrScheduler], None] | None = None,
) -> dict[Key, tuple]:
    """Each recording through ``FileJobs``: (seconds, text, the scheduler's report).
    ``on_worker`` is given the scheduler once it runs (bench/files_gpu.py watches it)."""
    from parley.config import Settings
    from parley.loading import load_asr
    from parley.recordings.files import FileRequest
    from parley.service import file_jobs
    from parley.workers.threads import in_passing_thread

    files: dict[str, float] = {}
    if windows_in_flight:
        files["windows_in_flight"] = windows_in_flight
    if piece_gap_s is not None:
        files["piece_gap_s"] = piece_gap_s
    settings = Settings(asr={"model": model, "compute_type": compute_type}, files=files)
    worker, _ = await in_passing_thread(load_asr, settings)
    await worker.start(warm_up=True)
    if on_worker is not None:
        on_worker(worker)
    jobs = file_jobs(settings, worker, None)
    out = {}
    try:
        for key, audio in audios.items():
            began = time.perf_counter()
            with jobs.slot():
                result = await jobs.transcribe(audio, FileRequest(language="en"))
            out[key] = (time.perf_counter() - began, result.text, result.report.to_json())
    finally:
        await worker.stop()
    return out


# What ``auto`` runs Parley in on this CPU (models/device.py).
DEFAULT_COMPUTE = "bfloat16" if has_bfloat16_matrices() else "float32"


def transformers_run(model_dir: Path, audio: np.ndarray, multilingual: bool) -> tuple:
    import torch
    from transformers import pipeline

    asr = pipeline(
        "automatic-speech-recognition", model=str(model_dir), device="cpu", dtype=torch.float32
    )
    kwargs = {"generate_kwargs": {"language": "en", "task": "transcribe"}} if multilingual else {}
    began = time.perf_counter()
    text = asr(
        {"raw": audio, "sampling_rate": SAMPLE_RATE}, chunk_length_s=30, batch_size=BATCH, **kwargs
    )["text"]
    return time.perf_counter() - began, text


def faster_whisper_run(ct2_dir: Path, audio: np.ndarray, compute_type: str, batched: bool) -> tuple:
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    model = WhisperModel(str(ct2_dir), device="cpu", compute_type=compute_type, cpu_threads=2)
    began = time.perf_counter()
    if batched:
        segments, _ = BatchedInferencePipeline(model).transcribe(
            audio, batch_size=BATCH, beam_size=1, language="en"
        )
    else:
        segments, _ = model.transcribe(
            audio, beam_size=1, language="en", condition_on_previous_text=False
        )
    text = " ".join(s.text.strip() for s in segments)
    return time.perf_counter() - began, text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["tiny.en", "base"])
    parser.add_argument("--minutes", nargs="+", type=float, default=[1, 5, 20])
    parser.add_argument("--reference-minutes", type=float, default=5.0)
    parser.add_argument(
        "--recordings",
        type=int,
        default=1,
        metavar="N",
        help="N recordings of each length, their sentences begun at rounds 0..N-1: each "
        "system's speed over all of them, and its WER over all their words",
    )
    parser.add_argument(
        "--parley-windows",
        type=int,
        nargs="+",
        metavar="N",
        help="compare Parley with these files.windows_in_flight only (no other system)",
    )
    parser.add_argument(
        "--parley-compute",
        nargs="+",
        metavar="TYPE",
        help="compare Parley with these asr.compute_type only (no other system)",
    )
    parser.add_argument(
        "--parley-gap",
        type=float,
        nargs="+",
        metavar="S",
        help="compare Parley with these files.piece_gap_s only (no other system)",
    )
    args = parser.parse_args()
    from parley.config import Settings
    from parley.weights.bundle import ct2_source

    models_dir = Settings().models_dir
    made = {(m, i): recording(m, i) for m in args.minutes for i in range(args.recordings)}
    audios = {key: audio for key, (audio, _) in made.items()}
    said = {m: " ".join(made[m, i][1] for i in range(args.recordings)) for m in args.minutes}
    seconds = {
        m: sum(len(made[m, i][0]) for i in range(args.recordings)) / SAMPLE_RATE
        for m in args.minutes
    }

    def pooled(minutes: float, run: Callable, directory: Path, *more: object) -> tuple[float, str]:
        """``run(directory, audio, *more)`` over each recording of that length: the seconds
        spent, summed, and the texts, joined."""
        done = [run(directory, made[minutes, i][0], *more) for i in range(args.recordings)]
        return sum(d[0] for d in done), " ".join(d[1] for d in done)

    def parley_pooled(runs: dict) -> dict[float, tuple[float, str, list]]:
        return {
            m: (
                sum(runs[m, i][0] for i in range(args.recordings)),
                " ".join(runs[m, i][1] for i in range(args.recordings)),
                [runs[m, i][2] for i in range(args.recordings)],
            )
            for m in args.minutes
        }

    rows = []
    variants = [
        (w, "auto", None, f"parley, {w} windows in flight") for w in args.parley_windows or []
    ]
    variants += [(None, c, None, f"parley, compute {c}") for c in args.parley_compute or []]
    variants += [
        (None, "auto", g, f"parley, pauses kept up to {g:g} s") for g in args.parley_gap or []
    ]
    if variants:
        for model in args.models:
            for windows, compute, gap, system in variants:
                for minutes, (spent, text, reports) in parley_pooled(
                    asyncio.run(parley_run(model, audios, windows, compute, gap))
                ).items():
                    rows.append(
                        {
                            "model": model,
                            "minutes": minutes,
                            "system": system,
                            "seconds": spent,
                            "x_real_time": seconds[minutes] / spent,
                            "wer": wer(said[minutes], text),
                            "rows_per_step": float(
                                np.mean([r["mean_batch_rows"] for r in reports])
                            ),
                        }
                    )
        print_table(
            rows, ["model", "minutes", "system", "seconds", "x_real_time", "wer", "rows_per_step"]
        )
        print(f"wrote {write_json('files-variants', {'rows': rows})}")
        return
    # Every Parley run first: CTranslate2's threads, once started in this process, slowed
    # the torch runs after them (base's Parley ran 0.96 times as fast there as alone).
    parley_runs = {
        model: (
            parley_pooled(asyncio.run(parley_run(model, audios))),
            {
                f"parley {compute}": parley_pooled(
                    asyncio.run(parley_run(model, audios, compute_type=compute))
                )
                for compute in ("float32", "int8", "bfloat16")
                if compute != DEFAULT_COMPUTE and (compute != "bfloat16" or has_bfloat16_matrices())
            },
        )
        for model in args.models
    }
    for model in args.models:
        ct2 = ct2_source(model, Path(tempfile.gettempdir()) / f"parley-ct2-{model}")
        ours, more = parley_runs[model]
        for minutes in args.minutes:
            spent, text, report = ours[minutes]
            results = [(f"parley {DEFAULT_COMPUTE} (the default)", spent, text)]
            results += [(system, *runs[minutes][:2]) for system, runs in more.items()]
            if minutes <= args.reference_minutes:
                results.append(
                    (
                        "(a) transformers pipeline batch 8",
                        *pooled(
                            minutes,
                            transformers_run,
                            models_dir / model,
                            not model.endswith(".en"),
                        ),
                    )
                )
            for compute in ("float32", "int8"):
                results.append(
                    (
                        f"(b) faster-whisper sequential {compute}",
                        *pooled(minutes, faster_whisper_run, ct2, compute, False),
                    )
                )
                results.append(
                    (
                        f"(b) faster-whisper batched 8 {compute}",
                        *pooled(minutes, faster_whisper_run, ct2, compute, True),
                    )
                )
            for system, took, hypothesis in results:
                rows.append(
                    {
                        "model": model,
                        "minutes": minutes,
                        "system": system,
                        "seconds": took,
                        "x_real_time": seconds[minutes] / took,
                        "x_parley": spent / took,
                        "wer": wer(said[minutes], hypothesis),
                    }
                )
            rows[-len(results)]["decode"] = report
            print_table(
                rows[-len(results) :],
                ["model", "minutes", "system", "seconds", "x_real_time", "x_parley", "wer"],
            )
    print()
    print_table(rows, ["model", "minutes", "system", "seconds", "x_real_time", "x_parley", "wer"])
    print(f"wrote {write_json('files', {'rows': rows})}")


if __name__ == "__main__":
    main()
