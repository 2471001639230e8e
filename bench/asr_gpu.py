"""Per-token decoding cost on a GPU: dynamic cache vs static cache vs CUDA graphs, with drafts.

The lent GPU machine reaches no hub and carries no Parley models, so this runs
Whisper-shaped models with random weights (large-v3 and large-v3-turbo shapes, fp16,
SDPA, batch size one). Random weights say nothing about accuracy; they give the
per-pass cost that decides speculative decoding on a GPU. Drafts come from a decode
of the same input, so acceptance is set by construction:

  plain        greedy, no drafts
  hypothesis   the previous hypothesis: the full earlier output (every draft accepted)
  revised      the previous hypothesis with every 12th token changed (rejections, as
               when a partial's last words are revised)
  assistant    a 2-layer decoder-only assistant of the same width (random: its drafts
               are rejected; shows what drafting costs on each cache)
  batched xN   N copies decoded plainly in one batch (transformers' decoder, dynamic
               cache), ms per token per stream: when many streams wait

Every variant runs on ``dynamic`` (transformers' cache), ``static`` (Parley's
buffers, eager) and ``graphs`` (the same buffers replayed as CUDA graphs). Output
tokens are compared with plain greedy on the same cache. Sized to finish in about
two minutes on an H200; ``--device cpu --shape tiny`` checks the script here.

Usage: python bench/asr_gpu.py [--device cuda] [--shapes large-v3 turbo] [--tokens 120]
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from common import print_table, write_json
from transformers import WhisperConfig, WhisperForCausalLM, WhisperForConditionalGeneration

from parley.models.decoder_state import DynamicDecoder, OutputHead
from parley.models.drafters import AssistantDrafter, HypothesisDrafter
from parley.models.greedy import GreedyVerifier
from parley.models.static_decoder import StaticDecoder

SHAPES = {  # d_model, encoder layers, decoder layers, heads, mel bins
    "large-v3": (1280, 32, 32, 20, 128),
    "turbo": (1280, 32, 4, 20, 128),
    "tiny": (384, 4, 4, 6, 80),
}
VOCAB = 51866
PROMPT = [50258, 50259, 50360, 50364]  # <|startoftranscript|><|en|><|transcribe|><|notimestamps|>
NEVER = -1  # end-of-text id no argmax can pick: every decode runs to the token budget


def build(shape: str, tokens: int, device: torch.device, dtype: torch.dtype):
    d_model, enc_layers, dec_layers, heads, mels = SHAPES[shape]
    config = WhisperConfig(vocab_size=VOCAB, num_mel_bins=mels, d_model=d_model,
                           encoder_layers=enc_layers, decoder_layers=dec_layers,
                           encoder_attention_heads=heads, decoder_attention_heads=heads,
                           encoder_ffn_dim=4 * d_model, decoder_ffn_dim=4 * d_model,
                           max_target_positions=len(PROMPT) + tokens,
                           attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(device):
        main = WhisperForConditionalGeneration(config).to(dtype).eval()
        small = copy.deepcopy(config)
        small.decoder_layers = 2
        assistant = WhisperForCausalLM(small).to(dtype).eval()
    return main, assistant


def timed(fn, device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    result = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return result, time.perf_counter() - started


def run_shape(shape: str, tokens: int, repeats: int, device: torch.device, dtype,
              queues: list[int]) -> list[dict]:
    main, assistant = build(shape, tokens, device, dtype)
    caches = {"dynamic": (DynamicDecoder(main.model.decoder),
                          DynamicDecoder(assistant.model.decoder))}
    caches["static"] = (StaticDecoder(main.model.decoder), StaticDecoder(assistant.model.decoder))
    if device.type == "cuda":
        started = time.perf_counter()
        caches["graphs"] = (StaticDecoder(main.model.decoder, graphs=True),
                            StaticDecoder(assistant.model.decoder, graphs=True))
        capture_s = time.perf_counter() - started
    else:
        capture_s = 0.0
    head = OutputHead(assistant.proj_out)
    mels = main.config.num_mel_bins
    with torch.inference_mode():
        features = torch.randn(1, mels, 3000, device=device, dtype=dtype)
        hidden = main.model.encoder(features).last_hidden_state
    rows = []
    for cache, (decoder, assistant_decoder) in caches.items():
        verifier = GreedyVerifier(main, suppress=[], begin_suppress=[], eot=NEVER,
                                  no_speech_token=None, decoder=decoder)
        plain = verifier.decode(hidden, PROMPT, 0)  # warm-up, and the reference
        revised = [(t + 1) % VOCAB if i % 12 == 11 else t for i, t in enumerate(plain.tokens)]
        drafters = {
            "plain": lambda: None,
            "hypothesis": lambda: HypothesisDrafter(plain.tokens),
            "revised": lambda: HypothesisDrafter(revised),
            "assistant": lambda: AssistantDrafter(assistant_decoder.begin(hidden), head,
                                                  eot=NEVER),
        }
        for variant, make in drafters.items():
            verifier.decode(hidden, PROMPT, 0, make())  # warm-up
            best, out = float("inf"), None
            for _ in range(repeats):
                out, seconds = timed(lambda: verifier.decode(hidden, PROMPT, 0, make()), device)
                best = min(best, seconds)
            count = len(out.tokens) + 1
            rows.append({"shape": shape, "cache": cache, "variant": variant,
                         "ms_per_token": 1000 * best / count, "tokens": count,
                         "passes": out.stats.passes + 1,
                         "mean_accepted": out.stats.mean_accepted,
                         "identical": out.tokens == plain.tokens})
    stock = next(r for r in rows if r["cache"] == "dynamic" and r["variant"] == "plain")
    for row in rows:
        same_cache = next(r for r in rows if r["cache"] == row["cache"] and
                          r["variant"] == "plain")
        row["speedup"] = same_cache["ms_per_token"] / row["ms_per_token"]
        row["vs_stock"] = stock["ms_per_token"] / row["ms_per_token"]
        row["capture_s"] = capture_s if row["cache"] == "graphs" else None
    for size in queues:  # plain batched greedy serving ``size`` waiting decodes per step
        batch = hidden.expand(size, -1, -1).contiguous()
        verifier.decode_batch(batch, PROMPT, 0)  # warm-up
        best = float("inf")
        for _ in range(repeats):
            out, seconds = timed(lambda: verifier.decode_batch(batch, PROMPT, 0), device)
            best = min(best, seconds)
        count = size * (len(out[0].tokens) + 1)
        rows.append({"shape": shape, "cache": "dynamic", "variant": f"batched x{size}",
                     "ms_per_token": 1000 * best / count, "tokens": count,
                     "passes": len(out[0].tokens) + 1, "mean_accepted": 0.0,
                     "identical": all(o.tokens == out[0].tokens for o in out),
                     "speedup": None, "vs_stock": stock["ms_per_token"] / (1000 * best / count),
                     "capture_s": None})
    with torch.inference_mode():  # the encoder once, for scale
        _, encoder_s = timed(lambda: main.model.encoder(features), device)
    for row in rows:
        row["encoder_ms"] = 1000 * encoder_s
    del main, assistant, caches
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--shapes", nargs="+", default=["large-v3", "turbo"], choices=SHAPES)
    parser.add_argument("--tokens", type=int, default=120, help="tokens per decode")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--queues", type=int, nargs="*", default=[4, 8],
                        help="batch sizes for plain batched decoding (per-stream cost)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    device = torch.device(args.device)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    rows = []
    for shape in args.shapes:
        rows += run_shape(shape, args.tokens, args.repeats, device, dtype, args.queues)
        print_table(rows[-1:], ["shape", "cache", "variant", "ms_per_token"])  # progress
    print()
    print_table(rows, ["shape", "cache", "variant", "ms_per_token", "tokens", "passes",
                       "mean_accepted", "speedup", "vs_stock", "identical", "encoder_ms",
                       "capture_s"])
    payload = {"device": args.device,
               "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
               "torch": torch.__version__, "rows": rows}
    path = write_json("asr-gpu", payload)
    if args.json:
        import json
        with open(args.json, "w") as out:
            json.dump(payload, out, indent=2)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
