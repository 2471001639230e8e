"""The reference handler's two recordings on a GPU, an 8 s clip and a 60 s recording:
its two ways (batched, or assisted at batch 1) against Parley's file pipeline, plain
and with the step scheduler's own choice of drafts and rows.

The lent GPU reaches no hub and carries no Parley models, so the models are
large-v3-shaped with random weights (fp16, SDPA), and what the real models would say
comes from here, in two steps:

1. ``--prepare DIR`` (here, on the CPU, real weights): Parley's ``FileJobs`` transcribes
   both recordings with the bundled ``base`` model, and every request it hands the step
   scheduler is kept (its audio, and how many tokens the real model wrote for it), with
   the bundle's tokenizer files.
2. ``--cases DIR`` (on the GPU): a large-v3-shaped main model and a distil-large-v3-shaped
   assistant (the main model's encoder, 2 decoder layers) are written as checkpoints and
   loaded by ``WhisperEngine``, as any checkpoint is. The same requests go through
   ``AsrScheduler`` again, each decode stopping at the real model's token count. Random
   weights decide no text, so how often drafts are right is set by construction:
   *drafts right*: the main decoder's layers after the second add nothing (their output
   projections are zero, their cost is paid), so the assistant, its first two layers,
   drafts what it would write; *drafts wrong*: the assistant's decoder is random.
   The reference handler's way is transformers' ``pipeline(chunk_length_s=30)`` on
   the same checkpoints, batch 8, or batch 1 with ``assistant_model``, writing as many
   tokens a second of audio as the real model did.

A window's retry waits for the windows before it, and word alignment runs, as in the
server. Seconds are the best of ``--repeats`` after a warm-up; ``same_tokens`` says
whether every run of a variant wrote plain's tokens (the main model is the same in
all of them). ``make gpu-wheels`` runs
step 1 and bench/gpu_check.sh step 2. Usage:
  python bench/files_gpu.py --prepare DIR                                  (CPU, here)
  python bench/files_gpu.py --cases DIR --device cuda --shape large-v3     (the GPU)
  python bench/files_gpu.py --cases DIR --device cpu --shape base          (a check here)
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import functools
import json
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from common import print_table, write_json  # first: it puts tests/ on the path

import numpy as np
import torch

from parley.core.audio import SAMPLE_RATE

# The reference handler's two: (start, seconds) in bench/files.py's recording, whose
# first 30 s are sample.wav (its first 8 s mostly silence) and the rest espeak-ng talk.
CASES = {"8 s clip": (31.0, 8.0), "60 s recording": (0.0, 60.0)}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")
DRAFT_LAYERS = 2  # distil-large-v3's decoder


# ---------------------------------------------------------------- step 1, here


def kept_requests(audio: np.ndarray) -> list[dict]:
    """Every request FileJobs hands the scheduler for ``audio`` (bundled base, English):
    its audio, the tokens the real model wrote, and whether it waited for another."""
    from files import parley_run

    kept: list[tuple] = []

    def keep(worker) -> None:
        submit = worker.submit_background

        def keeping(request, owner):
            future = submit(request, owner)
            kept.append((request, future, any(f.done() for _, f, _ in kept)))
            return future

        worker.submit_background = keeping

    ((_, text, _),) = asyncio.run(parley_run("base", {0: audio}, on_worker=keep)).values()
    print(f"  {len(audio) / SAMPLE_RATE:.0f} s: {text[:90]}…")
    return [
        {"audio": r.audio, "tokens": len(f.result().tokens), "after_others": later}
        for r, f, later in kept
    ]


def prepare(out: Path) -> None:
    from files import recording
    from parley.config import Settings

    audio, _ = recording(1)
    out.mkdir(parents=True, exist_ok=True)
    arrays, cases = {}, {}
    for name, (start, seconds) in CASES.items():
        clip = audio[int(start * SAMPLE_RATE) : int((start + seconds) * SAMPLE_RATE)]
        requests = kept_requests(clip)
        arrays[f"{name}/audio"] = clip
        for i, r in enumerate(requests):
            arrays[f"{name}/{i}"] = r.pop("audio")
        cases[name] = requests
    np.savez(out / "audio.npz", **arrays)
    (out / "cases.json").write_text(json.dumps(cases, indent=1))
    tokenizer = Settings().models_dir / "base"
    for file in TOKENIZER_FILES:
        shutil.copy(tokenizer / file, out / file)
    print(f"wrote {out}")


# ---------------------------------------------------------------- step 2, the GPU


def write_checkpoints(cases: Path, shape: str, device: torch.device, where: Path) -> None:
    """``where/main`` and ``where/assistant``: random weights of ``shape``, the main
    decoder's layers after the first DRAFT_LAYERS adding nothing (drafts right)."""
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    from asr_gpu import shaped_config

    vocab = json.loads((cases / "tokenizer.json").read_text())
    base = json.loads((cases / "generation_config.json").read_text())
    config = shaped_config(
        shape,
        vocab_size=max(t["id"] for t in vocab["added_tokens"]) + 1,
        decoder_start_token_id=base["decoder_start_token_id"],
        eos_token_id=base["eos_token_id"],
        pad_token_id=base["eos_token_id"],
        architectures=["WhisperForConditionalGeneration"],
    )
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        main = WhisperForConditionalGeneration(config).to(dtype).eval()
        small = copy.deepcopy(config)  # the main model keeps its own
        small.decoder_layers = DRAFT_LAYERS
        assistant = WhisperForConditionalGeneration(small).to(dtype).eval()
    with torch.no_grad():
        # No decode ends early by chance: end-of-text's logit is 0, never the top of
        # the vocabulary's random ones (the assistant copies this row too).
        main.model.decoder.embed_tokens.weight[base["eos_token_id"]] = 0
        for layer in main.model.decoder.layers[DRAFT_LAYERS:]:
            for linear in (layer.self_attn.out_proj, layer.encoder_attn.out_proj, layer.fc2):
                linear.weight.zero_()
                if linear.bias is not None:
                    linear.bias.zero_()
        assistant.model.encoder.load_state_dict(main.model.encoder.state_dict())
        ours = {
            k: v
            for k, v in main.model.decoder.state_dict().items()
            if k in assistant.model.decoder.state_dict()
        }
        assistant.model.decoder.load_state_dict(ours)
    extractor = WhisperFeatureExtractor(feature_size=config.num_mel_bins)
    for name, model in (("main", main), ("assistant", assistant)):
        model.save_pretrained(where / name)
        extractor.save_pretrained(where / name)
        for file in TOKENIZER_FILES:
            shutil.copy(cases / file, where / name / file)
    del main, assistant


def capped(engine, tokens_of: dict[int, int], budgets: list[int]) -> None:
    """Each decode the engine starts stops where the real model stopped (random weights
    would write to the window's end), and ``budgets`` adds up the draft tokens the
    scheduler granted: bench-only wrappers of ``engine.start`` and ``engine.step``."""
    start, step = engine.start, engine.step

    def start_capped(requests):
        decodes = start(requests)
        for d in decodes:
            # The warm-up's decodes are none of the recordings': as long as a short one.
            d.main.room = min(d.main.room, tokens_of.get(id(d.request.audio), 32))
        return decodes

    def step_counted(decodes, granted):
        budgets.append(sum(granted))
        return step(decodes, granted)

    engine.start, engine.step = start_capped, step_counted


class FileRun(NamedTuple):
    seconds: float
    drafted: int  # draft tokens offered
    accepted: int  # and kept
    tokens: list[tuple[int, ...]]  # each request's


async def parley_file(worker, requests: list[dict]) -> FileRun:
    """The kept requests through the scheduler as FileJobs sends them: the first ones
    together, a window's retry once its window is done."""
    from parley.core.asr import AsrRequest

    owner = object()
    began = time.perf_counter()
    first = [r for r in requests if not r["after_others"]]
    later = [r for r in requests if r["after_others"]]
    results = []
    for wave in (first, later):
        futures = [
            worker.submit_background(AsrRequest(r["audio"], "en", with_words=True), owner)
            for r in wave
        ]
        results += await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
    return FileRun(
        time.perf_counter() - began,
        sum(r.stats.drafted for r in results),
        sum(r.stats.accepted for r in results),
        [r.tokens for r in results],
    )


async def parley_rows(where: Path, cases: dict, device: torch.device, repeats: int) -> list:
    from parley.core.costs import cost_report
    from parley.models.device import DevicePlan
    from parley.models.whisper_engine import WhisperEngine
    from parley.workers.scheduler import AsrScheduler

    plan = DevicePlan(device, torch.float16 if device.type == "cuda" else torch.float32)
    began = time.perf_counter()
    engine = WhisperEngine(
        str(where / "main"), "main", plan, assistant_source=str(where / "assistant"), guards=None
    )
    print(f"  engine loaded in {time.perf_counter() - began:.1f} s (graphs: {engine.graphs})")
    assistant = engine.assistant
    right = {k: v.clone() for k, v in assistant.decoder.state_dict().items()}
    torch.manual_seed(1)
    wrong = {k: torch.randn_like(v) * 0.02 if v.dim() > 1 else v for k, v in right.items()}
    wrong["embed_tokens.weight"][engine.model.generation_config.eos_token_id] = 0
    granted: list[int] = []
    capped(engine, {id(r["audio"]): r["tokens"] for rs in cases.values() for r in rs}, granted)
    worker = AsrScheduler(engine, 64)
    await worker.start(warm_up=True)
    variants = {  # in place: the captured graphs read the same tensors
        "parley plain": (None, right),
        "parley's choice, drafts right": (assistant, right),
        "parley's choice, drafts wrong": (assistant, wrong),
    }
    rows = []
    plain_tokens: dict[str, list[tuple[int, ...]]] = {}
    try:
        for variant, (drafting, weights) in variants.items():
            engine.assistant = drafting
            assistant.decoder.load_state_dict(weights)
            for name, requests in cases.items():
                stats = worker.stats
                steps, stepped = stats.steps, stats.rows_stepped
                runs = []
                for _ in range(repeats + 1):
                    granted.clear()
                    runs.append(await parley_file(worker, requests))
                seconds = min(run.seconds for run in runs[1:])
                # Drafts and batching change no token: the same main model in every variant.
                plain_tokens.setdefault(name, runs[-1].tokens)
                rows.append(
                    {
                        "case": name,
                        "system": variant,
                        "seconds": seconds,
                        "decodes": len(requests),
                        "tokens": sum(r["tokens"] for r in requests),
                        "drafted": runs[-1].drafted,
                        "accepted": runs[-1].accepted,
                        "same_tokens": all(r.tokens == plain_tokens[name] for r in runs),
                        "granted": sum(granted),
                        "step_costs": cost_report(worker.step_cost, worker.encoder_cost),
                        "last_steps": worker.step_cost.recent[-80:],
                        "rows_per_step": (stats.rows_stepped - stepped)
                        / max(1, stats.steps - steps),
                    }
                )
                print_table(rows[-1:], ["case", "system", "seconds", "granted", "step_costs"])
    finally:
        await worker.stop()
    return rows


def pipeline_once(asr, audio: np.ndarray, batch: int, generate: dict) -> None:
    """One transcription the reference handler's way, every chunk writing exactly
    ``max_new_tokens`` (the pipeline empties the dict it is given: a new one each time)."""
    length = {"min_new_tokens": generate["max_new_tokens"]}
    inputs = {"raw": audio, "sampling_rate": SAMPLE_RATE}
    asr(inputs, chunk_length_s=30, batch_size=batch, generate_kwargs={**generate, **length})


def reference_rows(where: Path, cases: dict, audio: dict, device, repeats: int) -> list:
    """transformers' pipeline on the same checkpoints: batch 8, and batch 1 assisted."""
    from transformers import WhisperForConditionalGeneration, pipeline

    from asr_gpu import timed

    dtype = torch.float16 if device.type == "cuda" else torch.float32
    helper = WhisperForConditionalGeneration.from_pretrained(where / "assistant", dtype=dtype)
    helper = helper.to(device)
    asr = pipeline(
        "automatic-speech-recognition", model=str(where / "main"), device=device, dtype=dtype
    )
    rows = []
    for name, requests in cases.items():
        seconds_of_audio = len(audio[name]) / SAMPLE_RATE
        rate = sum(r["tokens"] for r in requests) / seconds_of_audio
        per_chunk = math.ceil(rate * min(30.0, seconds_of_audio))
        for system, batch, kwargs in (
            ("reference batched (batch 8)", 8, {}),
            ("reference assisted (batch 1)", 1, {"assistant_model": helper}),
        ):
            generate = {"language": "en", "max_new_tokens": per_chunk, **kwargs}
            call = functools.partial(pipeline_once, asr, audio[name], batch, generate)
            times = [timed(call, device)[1] for _ in range(repeats + 1)]
            rows.append(
                {
                    "case": name,
                    "system": system,
                    "seconds": min(times[1:]),
                    "tokens_per_chunk": per_chunk,
                }
            )
            print_table(rows[-1:], ["case", "system", "seconds"])
    return rows


def measure(cases_dir: Path, shape: str, device: torch.device, repeats: int, skip_reference: bool):
    cases = json.loads((cases_dir / "cases.json").read_text())
    arrays = np.load(cases_dir / "audio.npz")
    audio = {name: arrays[f"{name}/audio"] for name in cases}
    for name, requests in cases.items():
        for i, r in enumerate(requests):
            r["audio"] = arrays[f"{name}/{i}"]
    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        write_checkpoints(cases_dir, shape, device, Path(tmp))
        print(f"  checkpoints written in {time.perf_counter() - began:.1f} s")
        if device.type == "cuda":
            torch.cuda.empty_cache()
        rows = asyncio.run(parley_rows(Path(tmp), cases, device, repeats))
        if device.type == "cuda":
            torch.cuda.empty_cache()
        if not skip_reference:
            rows += reference_rows(Path(tmp), cases, audio, device, repeats)
    for row in rows:
        plain = next(r for r in rows if r["case"] == row["case"] and r["system"] == "parley plain")
        row["speed_vs_parley_plain"] = plain["seconds"] / row["seconds"]
        row["x_real_time"] = len(audio[row["case"]]) / SAMPLE_RATE / row["seconds"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prepare", type=Path, help="here: keep the requests and token counts")
    parser.add_argument("--cases", type=Path, help="what --prepare wrote")
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--shape", default="large-v3")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if args.prepare:
        prepare(args.prepare)
        return
    device = torch.device(args.device)
    rows = measure(args.cases, args.shape, device, args.repeats, args.skip_reference)
    print()
    columns = ["case", "system", "seconds", "x_real_time", "speed_vs_parley_plain"]
    columns += ["rows_per_step", "granted", "drafted", "accepted", "same_tokens"]
    print_table(rows, columns)
    payload = {
        "device": args.device,
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
        "shape": args.shape,
        "rows": rows,
    }
    print(f"\nwrote {write_json('files-gpu', payload)}")
    if args.json:
        Path(args.json).write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
