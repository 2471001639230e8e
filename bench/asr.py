"""ASR decoding variants side by side on real weights and real audio.

The streaming workload: each speech segment of sample.wav (as the server's VAD cuts
it) is decoded again every ``--step`` seconds as it grows, the way partials are,
and once more whole, the way its final is. Every prefix is decoded by every variant
in turn, so machine noise hits them alike, and the ratios compare like with like:

  plain       greedy, no drafts
  hypothesis  drafts from the previous decode of the same segment
  assistant   drafts from an assistant model (only where a same-vocabulary pair exists)
  both        hypothesis first, the assistant where the hypothesis has nothing to offer

each on both decoder caches (``--caches``), and transformers' own ``generate()`` (plain
greedy, for scale: what a stock pipeline pays),: ``static`` (Parley's fixed buffers, CUDA
graphs on GPU) and ``dynamic`` (transformers' own). ``speedup`` compares with plain
greedy on the same cache, ``vs_stock`` with plain greedy on the dynamic cache.

Usage: python bench/asr.py [--models tiny.en base] [--step 1.0] [--device auto]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from common import print_table, write_json

from audio_fixtures import SAMPLE_WAV, read_wav
from parley.config import Settings
from parley.core.vad import CloseReason, SegmentClosed, VadConfig, VadSegmenter
from parley.models.bundle import resolve_model
from parley.models.device import plan_device
from parley.models.whisper_engine import WhisperEngine

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


def run_model(name: str, audio: np.ndarray, step: float, device: str, max_draft: int,
              caches: list[str]) -> list[dict]:
    models_dir = Settings().models_dir
    assistant = ASSISTANT_FOR.get(name)
    engines = {cache: WhisperEngine(
        resolve_model(name, models_dir), name, plan_device(device), max_draft=max_draft,
        assistant_source=resolve_model(assistant, models_dir) if assistant else None,
        assistant_label=assistant, guards=None, cache=cache) for cache in caches}
    multilingual = next(iter(engines.values())).multilingual
    language = "en" if multilingual else None
    drafts = ["plain", "hypothesis"] + (["assistant", "both"] if assistant else [])
    variants = [(cache, draft) for cache in caches for draft in drafts]
    generate_kwargs = {"language": "en", "task": "transcribe"} if multilingual else {}
    totals = {v: {"seconds": 0.0, "tokens": 0, "passes": 0, "accepted": 0, "verify_steps": 0,
                  "identical": True} for v in variants}
    audio_seconds = 0.0
    encoder_seconds = 0.0
    generate_seconds = 0.0
    for engine in engines.values():
        engine.transcribe(audio[:16000], language=language)  # warm-up, not counted
    reference_engine = engines[caches[0]]
    for segment in segments_of(audio):
        previous: tuple[int, ...] | None = None
        for prefix in prefixes(segment, step):
            audio_seconds += len(prefix) / 16000
            started = time.perf_counter()
            with torch.inference_mode():
                reference_engine.model.model.encoder(reference_engine.features(prefix))
            encoder_seconds += time.perf_counter() - started
            outputs = {}
            for cache, draft_source in variants:
                draft = previous if draft_source in ("hypothesis", "both") else None
                started = time.perf_counter()
                result = engines[cache].transcribe(
                    prefix, language=language, draft=draft,
                    use_assistant=draft_source in ("assistant", "both"))
                t = totals[(cache, draft_source)]
                t["seconds"] += time.perf_counter() - started
                t["tokens"] += len(result.tokens) + 1  # + end of text
                t["passes"] += result.stats.passes + 1  # + the prompt pass
                t["accepted"] += result.stats.accepted
                t["verify_steps"] += result.stats.verify_steps
                outputs[(cache, draft_source)] = result.tokens
            started = time.perf_counter()
            with torch.inference_mode():
                reference_engine.model.generate(reference_engine.features(prefix),
                                                **generate_kwargs)
            generate_seconds += time.perf_counter() - started
            plain = outputs[(caches[0], "plain")]
            for variant in variants:
                totals[variant]["identical"] &= outputs[variant] == plain
            previous = plain
    stock = totals.get(("dynamic", "plain"), totals[(caches[0], "plain")])["seconds"]
    rows = []
    for (cache, draft_source), t in totals.items():
        plain_seconds = totals[(cache, "plain")]["seconds"]
        decode_only = max(t["seconds"] - encoder_seconds, 1e-9)
        rows.append({
            "model": name, "cache": cache, "variant": draft_source,
            "seconds": t["seconds"], "tokens_per_s": t["tokens"] / t["seconds"],
            "rtf": t["seconds"] / audio_seconds,
            "passes": t["passes"], "tokens": t["tokens"],
            "mean_accepted": t["accepted"] / t["verify_steps"] if t["verify_steps"] else 0.0,
            "speedup": plain_seconds / t["seconds"],
            "decoder_speedup": (plain_seconds - encoder_seconds) / decode_only,
            "vs_stock": stock / t["seconds"],
            "vs_generate": generate_seconds / t["seconds"],
            "identical": t["identical"],
            "encoder_s": encoder_seconds,
            "generate_s": generate_seconds,
        })
    return rows


def run_queue(name: str, audio: np.ndarray, size: int, device: str) -> list[dict]:
    """``size`` decodes waiting at once (e.g. finals of as many sessions): one by one with
    drafts from each clip's earlier partial, one by one plain, or in one plain batch."""
    engine = WhisperEngine(resolve_model(name, Settings().models_dir), name,
                           plan_device(device), guards=None)
    language = "en" if engine.multilingual else None
    starts = np.linspace(6.5, len(audio) / 16000 - 5.0, size)
    clips = [audio[int(s * 16000):int(s * 16000) + 5 * 16000] for s in starts]
    drafts = [engine.transcribe(c[: int(len(c) * 0.8)], language=language).tokens for c in clips]
    engine.transcribe(clips[0], language=language)  # warm-up
    timings, outputs = {}, {}
    for variant in ("plain", "hypothesis", "batched"):
        started = time.perf_counter()
        if variant == "batched":
            results = engine.transcribe_batch(clips, language=language,
                                              with_words=[False] * size)
        else:
            results = [engine.transcribe(c, language=language,
                                         draft=d if variant == "hypothesis" else None)
                       for c, d in zip(clips, drafts)]
        timings[variant] = time.perf_counter() - started
        outputs[variant] = [r.tokens for r in results]
    return [{"model": name, "queue": size, "variant": v, "seconds": t,
             "speedup": timings["plain"] / t, "identical": outputs[v] == outputs["plain"]}
            for v, t in timings.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="+", default=["tiny.en", "base"])
    parser.add_argument("--step", type=float, default=1.0, help="seconds between re-decodes")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--max-draft", type=int, default=15)
    parser.add_argument("--caches", nargs="+", default=["static", "dynamic"],
                        choices=["static", "dynamic"])
    parser.add_argument("--seconds", type=float, default=30.0, help="of sample.wav to use")
    parser.add_argument("--queues", type=int, nargs="*", default=[4, 8],
                        help="queue lengths for the batched-versus-drafted comparison")
    args = parser.parse_args()
    audio = read_wav(SAMPLE_WAV)
    rows, queue_rows = [], []
    for name in args.models:
        rows += run_model(name, audio[: int(args.seconds * 16000)], args.step, args.device,
                          args.max_draft, args.caches)
        for size in args.queues:
            queue_rows += run_queue(name, audio, size, args.device)
    print("Streaming re-decodes (partials every step, then the final):")
    print_table(rows, ["model", "cache", "variant", "seconds", "tokens_per_s", "rtf", "passes",
                       "mean_accepted", "speedup", "decoder_speedup", "vs_stock", "vs_generate",
                       "identical", "encoder_s"])
    print("\nA queue of decodes waiting at once:")
    print_table(queue_rows, ["model", "queue", "variant", "seconds", "speedup", "identical"])
    path = write_json("asr", {"step_s": args.step, "max_draft": args.max_draft,
                              "caches": args.caches,
                              "device": args.device, "rows": rows, "queue_rows": queue_rows})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
