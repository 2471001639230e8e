"""Per-token decoding cost on a GPU: rows of the row decoder, eager and as CUDA graphs.

The lent GPU machine reaches no hub and carries no Parley models, so this runs
Whisper-shaped models with random weights (large-v3 and large-v3-turbo shapes, fp16,
SDPA). Random weights say nothing about accuracy; they give the per-pass cost that
decides speculative decoding and batching on a GPU. Drafts come from a decode of the
same input, so acceptance is set by construction:

  plain        greedy, no drafts
  hypothesis   the previous hypothesis: the full earlier output (every draft accepted)
  revised      the previous hypothesis with every 12th token changed (rejections, as
               when a partial's last words are revised)
  assistant    a 2-layer decoder-only assistant of the same width (random: its drafts
               are rejected; shows what drafting costs)

each at 1 row and at ``--rows`` rows stepping together (ms per token of each stream;
``throughput``: tokens per second over all rows, relative to one eager plain row), on
``eager`` buffers and on ``graphs`` (the same buffers replayed as CUDA graphs).
Output tokens are compared with plain greedy at one row. Sized to finish in about two
minutes on an H200; ``--device cpu --shapes tiny`` checks the script here.

Usage: python bench/asr_gpu.py [--device cuda] [--shapes large-v3 turbo] [--tokens 120]
"""

from __future__ import annotations

import argparse
import copy
import time

from common import print_table, write_json

import torch
from transformers import WhisperConfig, WhisperForCausalLM, WhisperForConditionalGeneration

from parley.models.drafters import AssistantDrafter, HypothesisDrafter
from parley.models.greedy import GreedyVerifier, RowDecode
from parley.models.output_head import OutputHead
from parley.models.row_decoder import RowDecoder

SHAPES = {  # d_model, encoder layers, decoder layers, heads, mel bins
    "large-v3": (1280, 32, 32, 20, 128),
    "turbo": (1280, 32, 4, 20, 128),
    "tiny": (384, 4, 4, 6, 80),
    "base": (512, 6, 6, 8, 80),
}
VOCAB = 51866
PROMPT = [50258, 50259, 50360, 50364]  # <|startoftranscript|><|en|><|transcribe|><|notimestamps|>
NEVER = -1  # end-of-text id no argmax can pick: every decode runs to the token budget
MAX_DRAFT = 15


def shaped_config(shape: str, **more) -> WhisperConfig:
    """A Whisper config of one of ``SHAPES`` (the rest as ``more`` says)."""
    d_model, enc_layers, dec_layers, heads, mels = SHAPES[shape]
    return WhisperConfig(
        num_mel_bins=mels,
        d_model=d_model,
        encoder_layers=enc_layers,
        decoder_layers=dec_layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=4 * d_model,
        decoder_ffn_dim=4 * d_model,
        **more,
    )


def build(shape: str, tokens: int, device: torch.device, dtype: torch.dtype):
    config = shaped_config(
        shape,
        vocab_size=VOCAB,
        max_target_positions=len(PROMPT) + tokens,
        attn_implementation="sdpa",
    )
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


def decode(verifier: GreedyVerifier, hidden, drafters) -> list[RowDecode]:
    """One row per drafter over ``hidden``, all stepping together until each is done."""
    rows = verifier.decoder.add(hidden.expand(len(drafters), -1, -1))
    room = verifier.decoder.max_positions - len(PROMPT)
    decodes = [RowDecode(row, PROMPT, 0, room, drafter) for row, drafter in zip(rows, drafters)]
    verifier.prime(decodes)
    while live := [d for d in decodes if not d.finished]:
        verifier.step(live, [MAX_DRAFT] * len(live))
    for row in rows:
        verifier.decoder.release(row)
    return decodes


def run_shape(
    shape: str, tokens: int, repeats: int, device: torch.device, dtype, row_counts: list[int]
) -> list[dict]:
    main, assistant = build(shape, tokens, device, dtype)
    capacity = max(row_counts)
    kinds = {"eager": False} | ({"graphs": True} if device.type == "cuda" else {})
    with torch.inference_mode():
        features = torch.randn(1, main.config.num_mel_bins, 3000, device=device, dtype=dtype)
        hidden = main.model.encoder(features).last_hidden_state
    head = OutputHead(main.proj_out)
    assistant_head = OutputHead(assistant.proj_out)
    rows = []
    for kind, graphs in kinds.items():
        started = time.perf_counter()
        decoder = RowDecoder(
            main.model.decoder, capacity=capacity, max_width=MAX_DRAFT + 1, graphs=graphs
        )
        assistant_rows = RowDecoder(
            assistant.model.decoder, capacity=capacity, max_width=MAX_DRAFT + 1, graphs=graphs
        )
        capture_s = time.perf_counter() - started if graphs else None
        verifier = GreedyVerifier(
            decoder,
            head,
            suppress=[],
            begin_suppress=[],
            eot=NEVER,
            no_speech_token=None,
            vocab=VOCAB,
            device=device,
        )
        (plain,) = decode(verifier, hidden, [None])  # warm-up, and the reference
        revised = [(t + 1) % VOCAB if i % 12 == 11 else t for i, t in enumerate(plain.tokens)]

        def assisted(assistant_rows=assistant_rows):
            (row,) = assistant_rows.add(hidden)
            return AssistantDrafter(row, assistant_head, eot=NEVER)

        drafters = {
            "plain": lambda: None,
            "hypothesis": lambda tokens=plain.tokens: HypothesisDrafter(tokens),
            "revised": lambda tokens=revised: HypothesisDrafter(tokens),
            "assistant": assisted,
        }
        for count in row_counts:
            for variant, make in drafters.items():
                best, out = float("inf"), None
                for attempt in range(repeats + 1):  # the first one warms up
                    made = [make() for _ in range(count)]
                    out, seconds = timed(lambda v=verifier, m=made: decode(v, hidden, m), device)
                    for drafter in made:
                        if isinstance(drafter, AssistantDrafter):
                            assistant_rows.release(drafter._state)
                    best = min(best, seconds) if attempt else best
                generated = sum(len(d.tokens) + 1 for d in out)
                rows.append(
                    {
                        "shape": shape,
                        "kind": kind,
                        "rows": count,
                        "variant": variant,
                        "ms_per_token": 1000 * best * count / generated,
                        "ms_per_step": 1000 * best / max(d.stats.passes for d in out),
                        "tokens": generated,
                        "mean_accepted": sum(d.stats.accepted for d in out)
                        / max(1, sum(d.stats.verify_steps for d in out)),
                        "identical": all(d.tokens == plain.tokens for d in out),
                        "capture_s": capture_s,
                    }
                )
    single = next(r for r in rows if (r["kind"], r["rows"], r["variant"]) == ("eager", 1, "plain"))
    for row in rows:  # tokens per second over all rows, against one eager plain row
        row["throughput"] = single["ms_per_token"] * row["rows"] / row["ms_per_token"]
    with torch.inference_mode():  # the encoder once, for scale
        encoder = main.model.encoder
        _, encoder_s = timed(lambda: encoder(features), device)
    for row in rows:
        row["encoder_ms"] = 1000 * encoder_s
    del main, assistant
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--shapes", nargs="+", default=["large-v3", "turbo"], choices=SHAPES)
    parser.add_argument("--tokens", type=int, default=120, help="tokens per decode")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--rows",
        type=int,
        nargs="+",
        default=[1, 4, 16],
        help="rows stepping together (ms per token per stream)",
    )
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    device = torch.device(args.device)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    rows = []
    for shape in args.shapes:
        rows += run_shape(shape, args.tokens, args.repeats, device, dtype, args.rows)
        print_table(rows[-1:], ["shape", "kind", "rows", "variant", "ms_per_token"])  # progress
    print()
    print_table(
        rows,
        [
            "shape",
            "kind",
            "rows",
            "variant",
            "ms_per_token",
            "ms_per_step",
            "tokens",
            "mean_accepted",
            "throughput",
            "identical",
            "encoder_ms",
            "capture_s",
        ],
    )
    payload = {
        "device": args.device,
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
        "torch": torch.__version__,
        "rows": rows,
    }
    path = write_json("asr-gpu", payload)
    if args.json:
        import json

        with open(args.json, "w") as out:
            json.dump(payload, out, indent=2)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
