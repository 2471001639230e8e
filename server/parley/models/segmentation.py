"""Local speaker segmentation: a window's audio in, each local speaker's activity out.

pyannote's segmentation-3.0 scores powerset classes (nobody, each speaker, each pair);
what the diarizer reads is each speaker's probability, the powerset's soft multilabel
form. Two runtimes, the same numbers to rounding:

- on a CPU, the bundled model in ONNX Runtime (``OnnxSegmentation``): exported once with
  the multilabel conversion inside and kept beside the weights, so a later start reads
  the file and never imports pyannote.audio (whose Lightning imports cost seconds of a
  core and some 150 MB at every start), and a window costs less (bench/VARIANTS.md,
  "The segmentation in ONNX Runtime");
- on a GPU, or for a hub pipeline's own model, torch (``TorchSegmentation``).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from parley.core.speaker_masks import FrameGrid
from parley.models.onnx_export import cpu_session, export_onnx, kept_export, metadata_of

# The example window the export traces (5 s); its batch and length axes stay free.
_EXAMPLE_SAMPLES = 80_000


class Segmentation(Protocol):
    """A segmentation model's activities, and where its frames fall in a window."""

    grid: FrameGrid

    def __call__(self, waveforms: np.ndarray) -> np.ndarray:
        """(batch, 1, samples) float32 audio → (batch, frames, speakers) in [0, 1]."""


class _Activity(torch.nn.Module):
    """A pyannote segmentation model followed by its powerset's soft multilabel form."""

    def __init__(self, model):
        from pyannote.audio.utils.powerset import Powerset

        super().__init__()
        self.model = model
        spec = model.specifications
        self.powerset = (
            Powerset(len(spec.classes), spec.powerset_max_classes) if spec.powerset else None
        )

    def forward(self, waveforms: torch.Tensor) -> torch.Tensor:
        output = self.model(waveforms)
        if self.powerset is None:
            return output
        return self.powerset.to_multilabel(output, soft=True)


def _grid_of(model) -> FrameGrid:
    field = model.receptive_field
    return FrameGrid(field.step, field.start)


class TorchSegmentation:
    """A pyannote segmentation model in torch, on ``device``."""

    def __init__(self, model, device: torch.device):
        self._activity = _Activity(model).to(device).eval()
        self._device = device
        self.grid = _grid_of(model)

    @torch.inference_mode()
    def __call__(self, waveforms: np.ndarray) -> np.ndarray:
        batch = torch.from_numpy(waveforms).to(self._device)
        return self._activity(batch).float().cpu().numpy()


class OnnxSegmentation:
    """An exported segmentation model in ONNX Runtime, one thread; its frame grid is
    read from the export's own properties."""

    def __init__(self, exported: bytes):
        self._session = cpu_session(exported)
        meta = metadata_of(self._session)
        self.grid = FrameGrid(float(meta["frame_step"]), float(meta["frame_start"]))

    def __call__(self, waveforms: np.ndarray) -> np.ndarray:
        return self._session.run(None, {"waveforms": waveforms})[0]


def bundle_segmentation(directory: Path, device: torch.device) -> Segmentation:
    """The bundle's segmentation-3.0 (``directory/pytorch_model.bin``): in ONNX Runtime on
    a CPU, exported at the first load and kept beside the weights, else in torch."""
    checkpoint = directory / "pytorch_model.bin"

    def model():
        from pyannote.audio import Model

        return Model.from_pretrained(str(checkpoint))

    if device.type != "cpu":
        return TorchSegmentation(model(), device)
    # what the export depends on besides torch: the weights, and the code that runs them
    code = importlib.metadata.version("pyannote.audio").encode()
    exported = kept_export(
        directory, "segmentation", [checkpoint.read_bytes(), code], lambda: _export(model())
    )
    return OnnxSegmentation(exported)


def _export(model) -> bytes:
    grid = _grid_of(model)
    return export_onnx(
        _Activity(model.eval()),
        torch.zeros(1, 1, _EXAMPLE_SAMPLES),
        ("waveforms", "activity"),
        {"waveforms": {0: "batch", 2: "samples"}, "activity": {0: "batch", 1: "frames"}},
        metadata={"frame_step": repr(grid.step), "frame_start": repr(grid.start)},
    )
