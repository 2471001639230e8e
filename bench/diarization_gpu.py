"""Diarized streams per GPU: the server's own diarization worker (``DiarizationWorker``,
every due step's window segmented in one pass, then each session's embeddings and
linking) over the bundled speaker models, on the device they were loaded on.

The lent GPU carries no Parley models, no espeak-ng and no network, so this runs in two
steps:

1. ``--prepare DIR`` (here): the first 40 s of development-set recordings (espeak-ng,
   under noise, phone-band) of 2, 3, 4 and 6 speakers (``bench/devset.py``, int16), how
   many speakers speak in them, how many a stream of them ends with on this CPU, the
   server's diarization config, and the bundled speaker models (segmentation-3.0, CAM++).
2. ``--cases DIR --device cuda`` (the GPU): the models are loaded by
   ``load_speaker_models`` as the server loads them (CAM++ in torch there, as on any
   GPU), and

   - *labels*: each recording is streamed once, all at once, to its end; the speakers
     each ends with (its closing relabel) against the truth and against this CPU's;
   - *speed*: S sessions (the recordings over and over) stream as fast as the worker
     steps them, for ``--seconds`` each once every window is full (the first steps,
     on less audio, are not counted), under each worker variant (threads, largest
     batch). A real-time stream needs one step every ``step_s``, so S sessions keep up
     while steps a second ≥ S / step_s; *streams per GPU* is the most sessions that did.

The models' part alone: the words (ASR) are measured by bench/files_gpu.py and
bench/asr_gpu.py. Usage:
  python bench/diarization_gpu.py --prepare DIR                         (CPU, here)
  python bench/diarization_gpu.py --cases DIR --device cuda             (the GPU)
  python bench/diarization_gpu.py --cases DIR --device cpu --sessions 2 (a check here;
    it keeps CAM++'s ONNX export in DIR, 28 MB to delete before DIR travels)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pickle
import shutil
import threading
import time
from pathlib import Path

from common import print_table, write_json  # first: it puts tests/ on the path

import numpy as np
import torch

from parley.core.audio import SAMPLE_RATE
from parley.models.embedders import MIN_EMBEDDING_SECONDS

SECONDS = 40  # of each recording
KINDS = ("espeak", "noisy", "phone")  # clean, under noise, phone-band
COUNTS = (2, 3, 4, 6)
LOOPS = 8  # a speed run's stream: its recording this many times over (320 s)
# (name, threads, largest batch): the server's default worker, then more of both.
VARIANTS = (("1 thread, batch 4", 1, 4), ("4 threads, batch 16", 4, 16))


# ---------------------------------------------------------------- step 1, here


def _recordings() -> list:
    """The development set's first synthetic recording of each kind and count (the
    recorded voices need Debian packages a fresh machine may lack)."""
    from devset import make

    return [make("dev", kind, speakers, 0) for speakers in COUNTS for kind in KINDS]


def prepare(out: Path) -> None:
    from parley.config import DiarizationSettings, Settings
    from parley.models.speaker_models import load_speaker_models
    from parley.weights.bundle import DIARIZATION

    out.mkdir(parents=True, exist_ok=True)
    models_dir = Settings().models_dir
    bundle = out / "models" / DIARIZATION.name
    shutil.rmtree(bundle, ignore_errors=True)
    shutil.copytree(models_dir / DIARIZATION.name, bundle, ignore=shutil.ignore_patterns("*.onnx"))
    config = DiarizationSettings().to_config()
    models = load_speaker_models("bundle", models_dir, torch.device("cpu"))
    recordings = _recordings()
    audio = [(r.audio[: SECONDS * SAMPLE_RATE] * 32767).astype(np.int16) for r in recordings]
    here = asyncio.run(_labels(models, config, [a.astype(np.float32) / 32767 for a in audio]))
    np.savez_compressed(out / "audio.npz", *audio)
    (out / "config.pkl").write_bytes(pickle.dumps(config))
    cases = [
        {"name": r.name, "speakers": _heard(r), "cpu_found": found}
        for r, found in zip(recordings, here)
    ]
    (out / "cases.json").write_text(json.dumps(cases, indent=1))
    print(f"kept {len(cases)} recordings in {out}")


def _heard(recording) -> int:
    """The speakers a second or more of whose speech lies in the first ``SECONDS``."""
    heard: dict = {}
    for turn in recording.turns:
        spoken = min(turn.end, SECONDS) - turn.start
        if spoken > 0:
            heard[turn.speaker] = heard.get(turn.speaker, 0.0) + spoken
    return sum(seconds >= 1.0 for seconds in heard.values())


# ---------------------------------------------------------------- step 2, the GPU


class _Timed:
    """The speaker models, adding up the seconds their two parts take (a GPU's work is
    waited for: each part ends by copying its results back)."""

    def __init__(self, models):
        self._models = models
        self.grid = models.grid
        self.seconds = {"segment": 0.0, "embed": 0.0}
        self.embeddings = 0
        self.lock = threading.Lock()

    def _timed(self, part: str, call, *args):
        began = time.perf_counter()
        try:
            return call(*args)
        finally:
            with self.lock:
                self.seconds[part] += time.perf_counter() - began

    def segment(self, windows):
        return self._timed("segment", self._models.segment, windows)

    def embed(self, window, masks):
        self.embeddings += int((masks.sum(axis=1) >= MIN_EMBEDDING_SECONDS * SAMPLE_RATE).sum())
        return self._timed("embed", self._models.embed, window, masks)


def _worker(models, config, threads: int, batch: int, profiler=None):
    from parley.models.device import set_threads
    from parley.workers.diarization import DiarizationWorker

    def started() -> None:
        set_threads(1)  # on a GPU each thread only feeds the device; on a CPU one core each
        if profiler is not None:
            profiler.enable()  # this thread's calls

    worker = DiarizationWorker(
        models, config, threads=threads, max_batch=batch, on_thread_start=started
    )
    worker.start()
    return worker


async def _labels(models, config, audios: list[np.ndarray]) -> list[int]:
    """The speakers each recording's stream ends with (its closing relabel's, else the
    live count), all streamed at once to their ends."""
    worker = _worker(models, config, 1, 4)

    async def session(audio: np.ndarray) -> int:
        diarizer = worker.new_stream()
        steps = list(diarizer.windows(audio))
        snapshot = None
        for k, (window, start, now) in enumerate(steps):
            final = k == len(steps) - 1
            snapshot = await asyncio.wrap_future(
                await worker.submit(diarizer, window, start, now, final=final)
            )
        assert snapshot is not None
        return (snapshot.closing or snapshot).speaker_count

    found = await asyncio.gather(*(session(a) for a in audios))
    await worker.stop()
    return list(found)


async def _speed(
    models, config, audios, sessions: int, threads: int, batch: int, seconds: float, profiler=None
):
    """Steps a second of ``sessions`` streams stepped as fast as the worker answers them,
    for ``seconds``, and where a step's time goes (with one thread: threads overlap).
    Each session first fills its window unmeasured (a stream's first steps see less
    audio and fewer speakers, so counting them would flatter)."""
    models = _Timed(models)
    worker = _worker(models, config, threads, batch, profiler)
    warm_steps = round(config.window_s / config.step_s)
    warmed = asyncio.Event()
    waiting = [sessions]
    deadline = [float("inf")]

    looped = [np.tile(audio, LOOPS) for audio in audios]  # one long stream of each

    async def session(k: int) -> int:
        diarizer = worker.new_stream()
        done = 0
        for step, (window, start, now) in enumerate(diarizer.windows(looped[k % len(looped)])):
            if step == warm_steps:
                waiting[0] -= 1
                if not waiting[0]:
                    warmed.set()
                await warmed.wait()
            if time.perf_counter() > deadline[0]:
                break
            await asyncio.wrap_future(await worker.submit(diarizer, window, start, now))
            done += step >= warm_steps
        return done

    async def measure() -> tuple[float, dict, float, float]:
        await warmed.wait()
        with models.lock:
            before = dict(models.seconds)
        busy_before, embedded_before = worker.stats.busy_seconds, models.embeddings
        began = time.perf_counter()
        deadline[0] = began + seconds
        return began, before, busy_before, embedded_before

    measuring = asyncio.ensure_future(measure())
    steps = await asyncio.gather(*(session(k) for k in range(sessions)))
    ended = time.perf_counter()
    began, before, busy_before, embedded_before = await measuring
    spent = ended - began
    await worker.stop()
    per_second = sum(steps) / spent
    done = max(1, sum(steps))
    busy_ms = 1000 * (worker.stats.busy_seconds - busy_before) / done
    segment_ms, embed_ms = (
        1000 * (models.seconds[part] - before[part]) / done for part in ("segment", "embed")
    )
    return {
        "busy_ms_per_step": busy_ms,
        "segment_ms_per_step": segment_ms,
        "embed_ms_per_step": embed_ms,
        "rest_ms_per_step": busy_ms - segment_ms - embed_ms,
        "embeddings_per_step": (models.embeddings - embedded_before) / done,
        "sessions": sessions,
        "threads": threads,
        "batch": batch,
        "steps": sum(steps),
        "seconds": spent,
        "steps_per_second": per_second,
        "realtime_streams": per_second * config.step_s,
        "keeps_up": per_second * config.step_s >= sessions,
    }


def run_cases(
    cases_dir: Path, device: str, sessions: list[int], seconds: float, profile: int = 0
) -> dict:
    from parley.models.speaker_models import load_speaker_models

    cases = json.loads((cases_dir / "cases.json").read_text())
    config = pickle.loads((cases_dir / "config.pkl").read_bytes())
    with np.load(cases_dir / "audio.npz") as kept:
        audios = [kept[f"arr_{i}"].astype(np.float32) / 32767 for i in range(len(cases))]
    began = time.perf_counter()
    models = load_speaker_models("bundle", cases_dir / "models", torch.device(device))
    print(f"speaker models loaded on {device} in {time.perf_counter() - began:.1f} s")
    found = asyncio.run(_labels(models, config, audios))
    labels = [
        {**case, "found": n, "right": n == case["speakers"], "as_cpu": n == case["cpu_found"]}
        for case, n in zip(cases, found)
    ]
    if device == "cuda":  # cuDNN's convolutions round to TF32 unless told not to
        torch.backends.cudnn.allow_tf32 = False
        exact = asyncio.run(_labels(models, config, audios))
        torch.backends.cudnn.allow_tf32 = True
        for row, n in zip(labels, exact):
            row.update(found_fp32=n, as_cpu_fp32=n == row["cpu_found"])
    columns = ["name", "speakers", "cpu_found", "found", "right", "as_cpu"]
    print_table(labels, columns + (["found_fp32", "as_cpu_fp32"] if device == "cuda" else []))
    rows = []
    for name, threads, batch in VARIANTS:
        for count in sessions:
            row = asyncio.run(_speed(models, config, audios, count, threads, batch, seconds))
            rows.append({"variant": name, **row})
            print(
                f"{name}, {count} sessions: {row['steps_per_second']:.0f} steps/s, "
                f"{row['realtime_streams']:.0f} real-time streams",
                flush=True,
            )
    print_table(
        rows,
        [
            "variant",
            "sessions",
            "steps",
            "steps_per_second",
            "realtime_streams",
            "keeps_up",
            "segment_ms_per_step",
            "embed_ms_per_step",
            "rest_ms_per_step",
            "embeddings_per_step",
        ],
    )
    if profile:  # the functions one thread's steps spent the most time in
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        asyncio.run(_speed(models, config, audios, profile, 1, 4, seconds, profiler))
        print(f"\none thread, batch 4, {profile} sessions, profiled:")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    kept_up = [r["sessions"] for r in rows if r["keeps_up"]]
    streams = max(kept_up, default=0)
    print(f"streams per device (the most sessions that kept up): {streams}")
    return {
        "device": torch.cuda.get_device_name() if device == "cuda" else device,
        "labels": labels,
        "speed": rows,
        "streams_per_device": streams,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepare", type=Path, help="here: keep recordings and models")
    parser.add_argument("--cases", type=Path, help="what --prepare wrote")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--sessions", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--seconds", type=float, default=12.0, help="each speed run's length")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="also profile N sessions' steps"
    )
    args = parser.parse_args()
    if args.prepare:
        prepare(args.prepare)
        return
    if not args.cases:
        parser.error("give --prepare DIR or --cases DIR")
    result = run_cases(args.cases, args.device, args.sessions, args.seconds, args.profile)
    print(f"wrote {write_json('diarization-gpu', result)}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
