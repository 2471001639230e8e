"""Linear layers in int8 on a CPU, each row of activations quantized on its own
(``asr.compute_type`` int8).

fbgemm's int8 products are several times faster than float32's here, and read a
quarter of the bytes. A plan in int8 quantizes the encoder's linear layers, and the
output head reads its vocabulary matrix in int8 (``output_head.py``). The decoder's
layers stay float32: in int8 too, tiny.en's errors on sample.wav went from 0.218 to
0.345 (WER), and drafts could change tokens; as it is, they change none
(bench/VARIANTS.md, "int8 on a CPU").

torch's dynamic quantization picks one activation scale for a whole input tensor, so a
row's result would depend on the other rows it is batched with, and Parley promises
that batching changes no token. ``RowwiseInt8Linear`` makes the scale each row's own:
it divides every row by its largest magnitude and adds one fixed row spanning [-1, 1],
so the tensor's range, and with it the scale, is the same whatever the batch holds.
The weights are quantized per output channel.
"""

from __future__ import annotations

import warnings

import torch
from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear
from torch.ao.quantization import per_channel_dynamic_qconfig


class RowwiseInt8Linear(torch.nn.Module):
    """A float32 ``nn.Linear`` as int8 weights; rows of the input quantized one by one."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        unbiased = torch.nn.Linear(linear.in_features, linear.out_features, bias=False)
        unbiased.weight = linear.weight
        unbiased.qconfig = per_channel_dynamic_qconfig
        with warnings.catch_warnings():  # torch.ao's notice that it moves to torchao
            warnings.simplefilter("ignore")
            self.product = DynamicInt8Linear.from_float(unbiased)
        # The bias is added after the row's scale is put back, so it is not scaled.
        self.bias = None if linear.bias is None else linear.bias.detach().clone()
        span = torch.zeros(1, linear.in_features)
        span[0, 0], span[0, -1] = -1.0, 1.0
        self.span = span
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        peak = rows.abs().amax(1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)
        out = self.product(torch.cat([rows / peak, self.span]))[:-1] * peak
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)


def quantize_linears(model: torch.nn.Module) -> int:
    """Replace every ``nn.Linear`` under ``model`` (on the CPU, float32) by its
    ``RowwiseInt8Linear``, in place; how many were replaced."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, name, RowwiseInt8Linear(child))
                replaced += 1
    return replaced
