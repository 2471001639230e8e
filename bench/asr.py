"""ASR decoding variants side by side on real weights and real audio.

The streaming workload: each speech segment of sample.wav (as the server's VAD cuts
it) is decoded again every ``--step`` seconds as it grows, the way partials are,
and once more whole, the way its final is. Every prefix is decoded by every variant
in turn, so machine noise hits them alike, and the ratios compare like with like:

  plain       greedy, no drafts
  hypothesis  drafts from the previous decode of the same segment
  assistant   drafts from an assistant model (only where a same-vocabulary pair exists)
  assistant, own encoder
              the same, the assistant running its own copy of the encoder (what it did
              before an assistant whose encoder holds the main's weights read the main's)
  both        hypothesis first, the assistant where the hypothesis has nothing to offer

and transformers' own ``generate()`` (plain greedy, for scale: what a stock pipeline
pays). ``speedup`` compares with Parley's plain greedy.

Then a queue: ``--queues`` finals (5 s clips, each with its earlier partial as a draft)
waiting at once, as when many streams end a turn together: decoded one by one (plain,
drafted), together in one batch at fixed draft budgets (0: plain batched decoding;
15: every row fully speculative), and by the scheduler, whose budgets come from the
costs it measures. ``speedup`` is against plain one by one.

Usage: python bench/asr.py [--models tiny.en base] [--step 1.0] [--device auto]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from common import engine_plan, print_table, write_json

import numpy as np
import torch

from audio_fixtures import SAMPLE_WAV, read_wav
from parley.config import Settings
from parley.core.asr import AsrRequest
from parley.core.vad import CloseReason, SegmentClosed, VadConfig, VadSegmenter
from parley.models.whisper_engine import WhisperEngine
from parley.weights.bundle import resolve_model
from parley.workers.scheduler import AsrScheduler

# The only same-vocabulary pair a registry carries is base with itself: it shows the
# mechanism (every draft accepted) and its overhead, not a real speed-up.
ASSISTANT_FOR = {"base": "base"}


def segments_of(audio: np.ndarray) -> list[SegmentClosed]:
    segmenter = VadSegmenter(VadConfig())
    events = segmenter.push(audio) + segmenter.flush(CloseReason.END_OF_STREAM)
    return [e for e in events if isinstance(e, SegmentClosed)]


def prefixes(segment: SegmentClosed, step: float) -> list[np.ndarray]:
    n = len(segment.audio)
    cuts = list(range(int(step * 16000), n, int(step * 16000))) + [n]
    return [segment.audio[:c] for c in cuts]


def run_model(name: str, audio: np.ndarray, step: float, device: str, max_draft: int) -> list[dict]:
    models_dir = Settings().models_dir
    assistant = ASSISTANT_FOR.get(name)
    engine = WhisperEngine(
        resolve_model(name, models_dir), name, engine_plan(device), max_draft=max_draft, guards=None
    )
    engines = {"plain": engine, "hypothesis": engine}
    if assistant:

        def assisted_engine() -> WhisperEngine:
            return WhisperEngine(
                resolve_model(name, models_dir),
                name,
                engine_plan(device),
                max_draft=max_draft,
                guards=None,
                assistant_label=assistant,
                assistant_source=resolve_model(assistant, models_dir),
            )

        assisted, own = assisted_engine(), assisted_engine()
        assert own.assistant is not None
        # Its own encoder pass: the plain engine's encoder, the same weights as its main
        # model's but another module, so it is not shared (a deep copy cannot copy the
        # weights oneDNN has reordered).
        own.assistant.encoder = engine.model.model.encoder
        engines.update({"assistant": assisted, "assistant, own encoder": own, "both": assisted})
    language = "en" if engine.multilingual else None
    generate_kwargs = {"language": "en", "task": "transcribe"} if engine.multilingual else {}
    totals = {
        v: {
            "seconds": 0.0,
            "tokens": 0,
            "passes": 0,
            "accepted": 0,
            "verify_steps": 0,
            "identical": True,
        }
        for v in engines
    }
    audio_seconds = encoder_seconds = generate_seconds = 0.0
    for warm in set(engines.values()):
        warm.transcribe(audio[:16000], language=language)  # warm-up, not counted
    for segment in segments_of(audio):
        previous: tuple[int, ...] | None = None
        for prefix in prefixes(segment, step):
            audio_seconds += len(prefix) / 16000
            started = time.perf_counter()
            with torch.inference_mode():
                engine.model.model.encoder(engine.features(prefix))
            encoder_seconds += time.perf_counter() - started
            outputs = {}
            for variant, decoder in engines.items():
                draft = previous if variant in ("hypothesis", "both") else None
                started = time.perf_counter()
                result = decoder.transcribe(
                    prefix, language=language, draft=draft, budget=0 if variant == "plain" else None
                )
                t = totals[variant]
                t["seconds"] += time.perf_counter() - started
                t["tokens"] += len(result.tokens) + 1  # + end of text
                t["passes"] += result.stats.passes + 1  # + the prompt pass
                t["accepted"] += result.stats.accepted
                t["verify_steps"] += result.stats.verify_steps
                outputs[variant] = result.tokens
            started = time.perf_counter()
            with torch.inference_mode():
                engine.model.generate(engine.features(prefix), **generate_kwargs)
            generate_seconds += time.perf_counter() - started
            for variant in engines:
                totals[variant]["identical"] &= outputs[variant] == outputs["plain"]
            previous = outputs["plain"]
    plain_seconds = totals["plain"]["seconds"]
    rows = []
    for variant, t in totals.items():
        decode_only = max(t["seconds"] - encoder_seconds, 1e-9)
        rows.append(
            {
                "model": name,
                "variant": variant,
                "seconds": t["seconds"],
                "tokens_per_s": t["tokens"] / t["seconds"],
                "rtf": t["seconds"] / audio_seconds,
                "passes": t["passes"],
                "tokens": t["tokens"],
                "mean_accepted": t["accepted"] / t["verify_steps"] if t["verify_steps"] else 0.0,
                "speedup": plain_seconds / t["seconds"],
                "decoder_speedup": (plain_seconds - encoder_seconds) / decode_only,
                "vs_generate": generate_seconds / t["seconds"],
                "identical": t["identical"],
                "encoder_s": encoder_seconds,
                "generate_s": generate_seconds,
            }
        )
    return rows


def run_queue(name: str, audio: np.ndarray, sizes: list[int], device: str) -> list[dict]:
    """Finals of ``size`` streams waiting at once, each with its earlier partial as a draft."""
    engine = WhisperEngine(
        resolve_model(name, Settings().models_dir), name, engine_plan(device), guards=None
    )
    language = "en" if engine.multilingual else None
    warmed = AsrScheduler(engine, capacity=64)
    warmed.warm_up()
    rows = []
    for size in sizes:
        starts = np.linspace(6.5, len(audio) / 16000 - 5.0, size)
        clips = [audio[int(s * 16000) : int(s * 16000) + 5 * 16000] for s in starts]
        drafts = [
            engine.transcribe(c[: int(len(c) * 0.8)], language=language).tokens for c in clips
        ]
        requests = [AsrRequest(c, language, draft=d) for c, d in zip(clips, drafts)]
        timings, outputs = {}, {}
        for variant in (
            "plain one by one",
            "drafted one by one",
            "batched, budget 0",
            "batched, budget 15",
            "scheduler",
        ):
            started = time.perf_counter()
            if variant == "scheduler":
                results = asyncio.run(_schedule(engine, warmed, requests))
            elif variant.startswith("batched"):
                results = _batched(engine, requests, int(variant.rsplit(" ", 1)[1]))
            else:
                budget = 0 if variant.startswith("plain") else None
                results = [
                    engine.transcribe(r.audio, language=language, draft=r.draft, budget=budget)
                    for r in requests
                ]
            timings[variant] = time.perf_counter() - started
            outputs[variant] = [r.tokens for r in results]
        rows += [
            {
                "model": name,
                "queue": size,
                "variant": v,
                "seconds": t,
                "speedup": timings["plain one by one"] / t,
                "identical": outputs[v] == outputs["plain one by one"],
            }
            for v, t in timings.items()
        ]
    return rows


def _batched(engine: WhisperEngine, requests: list[AsrRequest], budget: int):
    """One batch: each clip's encoder pass (one at a time, as the CPU policy does), then
    all rows step together at a fixed draft budget."""
    decodes = [d for r in requests for d in engine.start([r])]
    results = {}
    while len(results) < len(decodes):
        live = [d for d in decodes if d not in results and not d.finished]
        if live:
            engine.step(live, [budget] * len(live))
        for d in decodes:
            if d not in results and d.finished:
                results[d] = engine.finish(d)
    return [results[d] for d in decodes]


async def _schedule(engine: WhisperEngine, warmed: AsrScheduler, requests: list[AsrRequest]):
    """The scheduler's own choices, starting from the costs the warm-up measured."""
    scheduler = AsrScheduler(engine, capacity=64)
    scheduler.encoder_cost, scheduler.step_cost = warmed.encoder_cost, warmed.step_cost
    await scheduler.start()
    try:
        futures = [await scheduler.submit_final(r) for r in requests]
        return [await asyncio.wrap_future(f) for f in futures]
    finally:
        await scheduler.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="+", default=["tiny.en", "base"])
    parser.add_argument("--step", type=float, default=1.0, help="seconds between re-decodes")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--max-draft", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=30.0, help="of sample.wav to use")
    parser.add_argument(
        "--queues",
        type=int,
        nargs="*",
        default=[1, 2, 4, 8],
        help="queue lengths for the batched-versus-drafted comparison",
    )
    args = parser.parse_args()
    audio = read_wav(SAMPLE_WAV)
    rows, queue_rows = [], []
    for name in args.models:
        rows += run_model(
            name, audio[: int(args.seconds * 16000)], args.step, args.device, args.max_draft
        )
        queue_rows += run_queue(name, audio, args.queues, args.device)
    print("Streaming re-decodes (partials every step, then the final):")
    print_table(
        rows,
        [
            "model",
            "variant",
            "seconds",
            "tokens_per_s",
            "rtf",
            "passes",
            "mean_accepted",
            "speedup",
            "decoder_speedup",
            "vs_generate",
            "identical",
            "encoder_s",
        ],
    )
    print("\nA queue of decodes waiting at once:")
    print_table(queue_rows, ["model", "queue", "variant", "seconds", "speedup", "identical"])
    path = write_json(
        "asr",
        {
            "step_s": args.step,
            "max_draft": args.max_draft,
            "device": args.device,
            "rows": rows,
            "queue_rows": queue_rows,
        },
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
