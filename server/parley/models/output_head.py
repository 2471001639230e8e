"""Final hidden states to float32 logits through a Whisper model's output projection.

On a GPU this is transformers' module. On a CPU, projecting a few rows is bound by
reading the whole vocabulary matrix (80 MB of float32 for tiny.en), and how fast a
BLAS library streams it depends erratically on the number of rows, and on which
layout of the matrix it reads (docs/architecture.md, "Decoder buffers", has what was
measured here). So the head times both
layouts for each row count once, at load, and keeps the faster. Both are the same
float32 product; only the order of the additions inside differs. (numpy's OpenBLAS
was faster alone, but its spinning threads slowed torch's next operations down.)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch

# Row counts timed at load; a count between two uses the larger one's choice.
CALIBRATED_ROWS = (*range(1, 9), 12, 16, 32, 64, 128)
CALIBRATION_REPEATS = 2
log = logging.getLogger(__name__)


class OutputHead:
    """Callable: hidden states (rows, d_model) or (d_model,) → float32 logits."""

    def __init__(self, proj_out: torch.nn.Module):
        self._proj_out = proj_out
        self._choice: dict[int, Callable[[torch.Tensor], torch.Tensor]] = {}
        weight = proj_out.weight
        if weight.device.type != "cpu" or proj_out.bias is not None:
            return
        with torch.no_grad():
            transposed = weight.t().contiguous()
        candidates = {
            "rows @ transposed": lambda h: h @ transposed,
            "weight @ rows.T": lambda h: (weight @ h.t()).t(),
        }
        chosen = {
            rows: self._fastest(candidates, rows, weight.shape[1]) for rows in CALIBRATED_ROWS
        }
        self._choice = {rows: candidates[name] for rows, name in chosen.items()}
        log.debug("output projection layout by row count: %s", chosen)

    @staticmethod
    def _fastest(candidates: dict, rows: int, width: int) -> str:
        hidden = torch.randn(rows, width)
        timings = {}
        for name, project in candidates.items():
            project(hidden)  # first call: allocation and thread start-up
            runs = []
            for _ in range(CALIBRATION_REPEATS):
                began = time.perf_counter()
                project(hidden)
                runs.append(time.perf_counter() - began)
            timings[name] = sorted(runs)[len(runs) // 2]
        return min(timings, key=lambda name: timings[name])

    @torch.inference_mode()
    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        if not self._choice:
            return self._proj_out(hidden).float()
        if hidden.dim() == 1:
            return self(hidden[None])[0]
        rows = hidden.shape[0]
        bucket = next((r for r in CALIBRATED_ROWS if r >= rows), CALIBRATED_ROWS[-1])
        return self._choice[bucket](hidden.contiguous()).float()
