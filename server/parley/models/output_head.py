"""Final hidden states to float32 logits through a Whisper model's output projection.

On a GPU this is transformers' module. On a CPU, projecting a few rows is bound by
reading the whole vocabulary matrix (80 MB of float32 for tiny.en), and how fast a
BLAS library streams it depends erratically on the number of rows, and on which
layout of the matrix it reads (docs/architecture.md, "Decoder buffers", has what was
measured here), or whether oneDNN reads it (``models/onednn.py``). So the head times
each the first time it projects a row count, and keeps the fastest for every later
call. All are the same float32 product; only the order of the additions inside
differs. Timing at first use, not at load, spends the nine timed projections only on
the row counts a server decodes, not on all fourteen at every start. (numpy's
OpenBLAS was faster alone, but its spinning threads slowed torch's next operations.)

With ``int8`` (a CPU plan's compute type int8) the head reads the matrix in int8
(``models/int8.py``), a quarter of the bytes, and then computes in float32 the logits
of the ``SHORTLIST`` tokens int8 ranks highest: the token chosen is float32's
wherever float32's best two are among them. int8 logits alone chose other tokens
where two were close: tiny.en's WER on sample.wav went from 0.218 to 0.356.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch

from parley.models import onednn

# Row counts timed (each at its first use); a count between two uses the larger one's.
CALIBRATED_ROWS = (*range(1, 9), 12, 16, 32, 64, 128)
CALIBRATION_REPEATS = 2
SHORTLIST = 8  # tokens whose logits an int8 head computes again in float32
log = logging.getLogger(__name__)


class OutputHead:
    """Callable: hidden states (rows, d_model) or (d_model,) → float32 logits."""

    def __init__(self, proj_out: torch.nn.Module, int8: bool = False):
        self._proj_out = proj_out
        self._candidates: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {}
        self._choice: dict[int, Callable[[torch.Tensor], torch.Tensor]] = {}
        self._int8: torch.nn.Module | None = None
        if int8:
            from parley.models.int8 import RowwiseInt8Linear

            assert isinstance(proj_out, torch.nn.Linear)
            self._int8 = RowwiseInt8Linear(proj_out)
            self._exact = proj_out.weight.detach()  # tied to the token embeddings: no copy
            return
        weight = proj_out.weight
        if weight.device.type != "cpu" or proj_out.bias is not None:
            return
        with torch.no_grad():
            transposed = weight.t().contiguous()
        self._candidates = {
            "rows @ transposed": lambda h: h @ transposed,
            "weight @ rows.T": lambda h: (weight @ h.t()).t(),
        }
        if onednn.available() and weight.dtype == torch.float32:
            packed = onednn.reordered(weight)
            self._candidates["oneDNN, reordered"] = lambda h: onednn.product(h, packed, None)

    def _chosen(self, bucket: int, width: int) -> Callable[[torch.Tensor], torch.Tensor]:
        """The faster layout for ``bucket`` rows, timed on the first call for it."""
        if bucket not in self._choice:
            name = self._fastest(self._candidates, bucket, width)
            self._choice[bucket] = self._candidates[name]
            log.debug("output projection layout for %d rows: %s", bucket, name)
        return self._choice[bucket]

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
        if self._int8 is not None:
            return self._shortlisted(hidden)
        if not self._candidates:
            return self._proj_out(hidden).float()
        if hidden.dim() == 1:
            return self(hidden[None])[0]
        rows, width = hidden.shape
        bucket = next((r for r in CALIBRATED_ROWS if r >= rows), CALIBRATED_ROWS[-1])
        return self._chosen(bucket, width)(hidden.contiguous()).float()

    def _shortlisted(self, hidden: torch.Tensor) -> torch.Tensor:
        """int8 logits, the top ``SHORTLIST`` of each row replaced by float32's."""
        assert self._int8 is not None
        rows = hidden[None] if hidden.dim() == 1 else hidden
        logits = self._int8(rows).float()
        top = logits.topk(SHORTLIST, dim=-1).indices
        logits.scatter_(1, top, torch.einsum("rkd,rd->rk", self._exact[top], rows))
        return logits[0] if hidden.dim() == 1 else logits
