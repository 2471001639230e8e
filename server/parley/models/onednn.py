"""Float32 linear layers on a CPU through oneDNN, over weights reordered once.

A decoder step multiplies a few rows by every weight matrix of the decoder. torch's
default path for that (MKL's sgemm) streams a matrix for a few rows far slower on some
CPUs than oneDNN does over the same matrix reordered once into oneDNN's blocked layout:
on a 2-core AMD EPYC, 6 rows through base's fc2 took 0.36 ms against 0.12 ms, and its
output head 8.6 ms (the faster of MKL's two layouts) against 6.7 ms. Both are the same
float32 product; only the order of the additions inside differs, as between any two
row counts. On another CPU MKL may be the faster, so ``faster_decoder_linears`` times
both on the decoder's own matrices when the model loads and keeps the faster.
"""

from __future__ import annotations

import logging
import time

import torch

log = logging.getLogger(__name__)
ROWS_TIMED = 8  # a decode step's rows when several decodes are in flight
REPEATS = 5


def available() -> bool:
    """Whether this torch can run oneDNN's linear layers (x86 and ARM builds can)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def reordered(weight: torch.Tensor, rows: int = ROWS_TIMED) -> torch.Tensor:
    """``weight`` (out, in) in oneDNN's own layout, for products of about ``rows`` rows."""
    with torch.no_grad():
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), rows)


def product(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ weight.T + bias`` over a ``reordered`` weight; ``x`` is (rows, in)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class OneDnnLinear(torch.nn.Module):
    """A float32 ``nn.Linear`` computed by oneDNN. It holds the weight in oneDNN's layout
    only (nothing reads a decoder layer's weights but its forward), so the model takes
    no more memory than before."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self._packed = reordered(linear.weight)
        self._bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = product(x.reshape(-1, self.in_features), self._packed, self._bias)
        return out.reshape(*x.shape[:-1], self.out_features)


def faster_decoder_linears(decoder: torch.nn.Module) -> bool:
    """Replace the float32 ``nn.Linear`` layers of ``decoder``'s layers (on the CPU) by
    ``OneDnnLinear`` where a step of ``ROWS_TIMED`` rows through all of them is faster
    so here; whether they were replaced."""
    layers = getattr(decoder, "layers", None)
    if not available() or layers is None:
        return False
    places = [
        (parent, name, child)
        for parent in layers.modules()
        for name, child in parent.named_children()
        if type(child) is torch.nn.Linear
        and child.weight.device.type == "cpu"
        and child.weight.dtype == torch.float32
    ]
    if not places:
        return False
    replacements = [OneDnnLinear(child) for _, _, child in places]
    mkl = _seconds([child for _, _, child in places])
    onednn = _seconds(replacements)
    log.debug(
        "decoder linears, %d rows: torch %.2f ms, oneDNN %.2f ms",
        ROWS_TIMED,
        mkl * 1e3,
        onednn * 1e3,
    )
    if onednn >= mkl:
        return False
    for (parent, name, _), replacement in zip(places, replacements):
        setattr(parent, name, replacement)
    return True


@torch.inference_mode()
def _seconds(layers: list[torch.nn.Module]) -> float:
    """The median time of a pass of ``ROWS_TIMED`` rows through each of ``layers``,
    after one pass to warm up."""
    inputs = [torch.randn(ROWS_TIMED, int(layer.in_features)) for layer in layers]
    for layer, x in zip(layers, inputs):
        layer(x)
    runs = []
    for _ in range(REPEATS):
        began = time.perf_counter()
        for layer, x in zip(layers, inputs):
            layer(x)
        runs.append(time.perf_counter() - began)
    return sorted(runs)[len(runs) // 2]
