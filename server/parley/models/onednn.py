"""Float32 linear layers on a CPU through oneDNN, over weights reordered once.

torch's default path for a float32 ``nn.Linear`` on a CPU is MKL's sgemm, which on some
CPUs (the AMD EPYCs measured here) is far slower than oneDNN over the same matrix
reordered once into oneDNN's blocked layout: on a 2-core AMD EPYC, a decoder step of 8
rows through base's decoder layers took 8.3 ms against 3.7 ms, and a 30 s encoder pass
0.58 s against 0.40 s (``bench/linears.py``). Both are the same float32 product; only
the order of the additions inside differs, as between any two row counts. On another
CPU MKL may be the faster, so ``faster_linears`` times both on the model's own matrices
when it loads and keeps the faster.
"""

from __future__ import annotations

import logging
import time

import torch

log = logging.getLogger(__name__)
STEP_ROWS = 8  # a decoder step's rows when several decodes are in flight
WINDOW_ROWS = 1500  # an encoder pass's rows: one clip's 30 s window
REPEATS = 5


def available() -> bool:
    """Whether this torch can run oneDNN's linear layers (x86 and ARM builds can)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def reordered(weight: torch.Tensor, rows: int = STEP_ROWS) -> torch.Tensor:
    """``weight`` (out, in) in oneDNN's own layout, for products of about ``rows`` rows."""
    with torch.no_grad():
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), rows)


def product(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ weight.T + bias`` over a ``reordered`` weight; ``x`` is (rows, in)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class OneDnnLinear(torch.nn.Module):
    """A float32 ``nn.Linear`` computed by oneDNN. It holds the weight in oneDNN's layout
    only (nothing reads a Whisper layer's weights but its forward), so the model takes
    no more memory than before."""

    def __init__(self, linear: torch.nn.Linear, rows: int = STEP_ROWS):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self._packed = reordered(linear.weight, rows)
        self._bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = product(x.reshape(-1, self.in_features), self._packed, self._bias)
        return out.reshape(*x.shape[:-1], self.out_features)


# Layer shapes (and rows) → whether oneDNN was the faster, timed once a process: two
# models of one architecture (a main model and its own copy as assistant) must end with
# the same layers, or their encoders no longer compare equal (``same_weights``) when a
# busy machine's timings would have chosen differently.
_FASTER: dict[tuple, bool] = {}


def faster_linears(stack: torch.nn.Module, rows: int) -> bool:
    """Replace the float32 ``nn.Linear`` layers of ``stack``'s layers (on the CPU) by
    ``OneDnnLinear`` where ``rows`` rows through the first layer's are faster so here;
    whether they were replaced. (The layers are alike: one is timed, so that a start
    spends a fraction of a second on it, not a full encoder pass per try.)"""
    layers = getattr(stack, "layers", None)
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
    first = set(layers[0].modules())
    timed = [child for parent, _, child in places if parent in first] or [places[0][2]]
    shapes = (rows, *((child.in_features, child.out_features) for child in timed))
    if shapes not in _FASTER:
        mkl = _seconds(timed, rows)
        onednn = _seconds([OneDnnLinear(child, rows) for child in timed], rows)
        log.debug(
            "%s linears, %d rows: torch %.2f ms, oneDNN %.2f ms",
            type(stack).__name__,
            rows,
            mkl * 1e3,
            onednn * 1e3,
        )
        _FASTER[shapes] = onednn < mkl
    if not _FASTER[shapes]:
        return False
    # Reordered only now: where torch is kept, the weights are not copied at all.
    for parent, name, child in places:
        setattr(parent, name, OneDnnLinear(child, rows))
    return True


def _seconds(layers: list[torch.nn.Module], rows: int) -> float:
    """``pass_seconds`` of ``rows`` random rows through each of ``layers``."""
    return pass_seconds(layers, [torch.randn(rows, int(layer.in_features)) for layer in layers])


@torch.inference_mode()
def pass_seconds(layers: list, inputs: list[torch.Tensor], repeats: int = REPEATS) -> float:
    """The median time of a pass of ``inputs`` through ``layers`` (one input each), after
    one pass to warm up."""
    for layer, x in zip(layers, inputs):
        layer(x)
    runs = []
    for _ in range(repeats):
        began = time.perf_counter()
        for layer, x in zip(layers, inputs):
            layer(x)
        runs.append(time.perf_counter() - began)
    return sorted(runs)[len(runs) // 2]
