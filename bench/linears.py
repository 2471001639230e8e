"""Whisper's linear layers on a CPU: torch's default path against oneDNN over weights
reordered once (``server/parley/models/onednn.py``), on the bundled models' own
weights, as ratios in one run: a decoder step's layers and output head, and an encoder
pass.

For each row count (the rows of one decoder step: 1 for a lone stream, up to 16 when
many decodes are batched) it times a pass of that many rows through every float32
linear layer of the decoder's layers, and the output projection onto the vocabulary,
each way in turn (median of ``--repeats``), so the machine's noise falls on both alike.
The server makes the same comparison at load (8 rows) and keeps the faster; the head
times each row count at its first use. The layers include the cross-attention's key
and value projections, which a step does not run: they project each decode's encoder
output once, when it joins, so they are also timed apart over 8 windows' 1,500
positions. Last, one 30 s window through the whole encoder, its linear layers each way
(attention's products and the convolutions are the same in both). Usage:
python bench/linears.py [--models tiny.en base] [--rows 1 2 4 8 16]
"""

from __future__ import annotations

import argparse
import copy

from common import print_table, write_json

import torch

from parley.models import onednn


def head_ways(head: torch.Tensor) -> dict:
    """The output projection of rows onto the vocabulary matrix ``head`` (vocabulary,
    width): torch's two layouts (``models/output_head.py`` keeps the faster) and oneDNN's."""
    transposed = head.t().contiguous()
    packed = onednn.reordered(head)
    return {
        "rows @ transposed": lambda x: x @ transposed,
        "weight @ rows.T": lambda x: (head @ x.t()).t(),
        "oneDNN": lambda x: onednn.product(x, packed, None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["tiny.en", "base"])
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    from transformers import WhisperForConditionalGeneration

    from parley.config import Settings
    from parley.models.device import set_threads
    from parley.weights.bundle import resolve_model

    if not onednn.available():
        raise SystemExit("this torch has no oneDNN linear layers")
    set_threads(None)
    rows_out, joins = [], []
    for name in args.models:
        model = WhisperForConditionalGeneration.from_pretrained(
            resolve_model(name, Settings().models_dir), torch_dtype=torch.float32
        ).eval()
        linears = [m for m in model.model.decoder.layers.modules() if type(m) is torch.nn.Linear]
        packed = [onednn.OneDnnLinear(m) for m in linears]
        head = model.proj_out.weight.detach()
        ways = head_ways(head)
        with torch.inference_mode():
            for rows in args.rows:
                xs = [torch.randn(rows, m.in_features) for m in linears]
                h = [torch.randn(rows, head.shape[1])]
                layers_torch = onednn.pass_seconds(linears, xs, args.repeats)
                layers_onednn = onednn.pass_seconds(packed, xs, args.repeats)
                head_torch = min(
                    onednn.pass_seconds([ways["rows @ transposed"]], h, args.repeats),
                    onednn.pass_seconds([ways["weight @ rows.T"]], h, args.repeats),
                )
                head_onednn = onednn.pass_seconds([ways["oneDNN"]], h, args.repeats)
                rows_out.append(
                    {
                        "model": name,
                        "rows": rows,
                        "layers_torch_ms": layers_torch * 1e3,
                        "layers_onednn_ms": layers_onednn * 1e3,
                        "layers_speedup": layers_torch / layers_onednn,
                        "head_torch_ms": head_torch * 1e3,
                        "head_onednn_ms": head_onednn * 1e3,
                        "head_speedup": head_torch / head_onednn,
                    }
                )
        cross = [
            getattr(layer.encoder_attn, projection)
            for layer in model.model.decoder.layers
            for projection in ("k_proj", "v_proj")
        ]
        windows = [torch.randn(8, 1500, m.in_features) for m in cross]
        with torch.inference_mode():
            cross_torch = onednn.pass_seconds(cross, windows, 5)
            cross_onednn = onednn.pass_seconds([onednn.OneDnnLinear(m) for m in cross], windows, 5)
        encoder = model.model.encoder
        packed_encoder = copy.deepcopy(encoder)
        for parent in list(packed_encoder.modules()):
            for child_name, child in list(parent.named_children()):
                if type(child) is torch.nn.Linear:
                    setattr(parent, child_name, onednn.OneDnnLinear(child, onednn.WINDOW_ROWS))
        features = [torch.randn(1, 80, 3000)]
        with torch.inference_mode():
            encoder_torch = onednn.pass_seconds([encoder], features, 5)
            encoder_onednn = onednn.pass_seconds([packed_encoder], features, 5)
        joins.append(
            {
                "model": name,
                "cross_kv_torch_ms": cross_torch * 1e3,
                "cross_kv_onednn_ms": cross_onednn * 1e3,
                "cross_kv_speedup": cross_torch / cross_onednn,
                "encoder_torch_ms": encoder_torch * 1e3,
                "encoder_onednn_ms": encoder_onednn * 1e3,
                "encoder_speedup": encoder_torch / encoder_onednn,
            }
        )
    print_table(rows_out, list(rows_out[0]))
    print()
    print_table(joins, list(joins[0]))
    print(f"wrote {write_json('linears', {'rows': rows_out, 'joins': joins})}")


if __name__ == "__main__":
    main()
