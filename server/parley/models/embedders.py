"""Speaker embeddings over masked audio: CAM++ (the offline bundle's, on ONNX Runtime on a
CPU) and a pyannote pipeline's own embedding model, behind one ``Embedder`` protocol."""

from __future__ import annotations

import importlib.util
import logging
import os
import warnings
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from parley.core.audio import SAMPLE_RATE

log = logging.getLogger(__name__)
MIN_EMBEDDING_SECONDS = 0.3
# Kaldi's fbank dithers by default (1.0: noise of one 16-bit step). Without it a frame of
# digital silence (synthesised pauses, muted or mu-law silent lines) takes the log of
# nothing, an outlier that dominates the mean normalisation, so that a one-step change
# in the audio moved a voice's embedding by a cosine distance of 0.15. The noise is
# seeded: the same audio always gets the same embedding.
FBANK_DITHER = 1.0


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
        spec = importlib.util.spec_from_file_location(
            "parley_campplus", directory / "camplusplus.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        model = module.CAMPPlus(feat_dim=80, embedding_size=self.dimension)
        state = torch.load(
            directory / "campplus_cn_en_common.pt", map_location="cpu", weights_only=True
        )
        model.load_state_dict(state)
        self._model = model.to(device).eval()
        self._device = device
        self._session = None
        if device.type == "cpu":
            self._session = _onnx_session(_onnx_model(self._model, directory))

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
    """``model`` (features (1, frames, 80) → embedding) exported to ONNX, read from
    ``directory`` where an earlier load kept it. The file's name is a digest of what
    the export depends on, so a changed input never reads a stale export. A directory
    nobody may write to (a read-only image) only costs the export at every load."""
    import hashlib

    digest = hashlib.sha256(torch.__version__.encode())
    for name in ("camplusplus.py", "campplus_cn_en_common.pt"):
        digest.update((directory / name).read_bytes())
    kept = directory / f"campplus-{digest.hexdigest()[:16]}.onnx"
    if kept.is_file():
        return kept.read_bytes()
    exported = _export_onnx(model)
    partial = kept.with_name(f"{kept.name}.{os.getpid()}.partial")
    try:
        partial.write_bytes(exported)
        partial.replace(kept)  # atomic: a concurrent load reads a whole file or none
    except OSError as exc:
        log.info("could not keep the CAM++ export in %s (%s)", directory, exc)
        partial.unlink(missing_ok=True)
    return exported


def _export_onnx(model: torch.nn.Module) -> bytes:
    import io

    exported = io.BytesIO()
    with warnings.catch_warnings():  # the exporter's notes on the model's own code
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (torch.zeros(1, 200, 80),),
            exported,
            input_names=["features"],
            output_names=["embedding"],
            dynamic_axes={"features": {1: "frames"}},
            dynamo=False,
        )
    return exported.getvalue()


def _onnx_session(exported: bytes):
    """An ONNX Runtime session of ``exported`` on one thread (the diarization thread's
    share of the cores)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(exported, options, providers=["CPUExecutionProvider"])


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
