"""Speaker models for streaming diarization: local segmentation and speaker embeddings.

Only the diarization worker imports this module, so a server without diarization
never imports pyannote. Two sources:

- ``bundle``: pyannote segmentation-3.0 and CAM++ (3D-Speaker) from the offline bundle;
- a pyannote pipeline (hub id with ``HF_TOKEN`` from the environment, or a local
  directory): its segmentation model and its speaker-embedding model.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "false")  # pyannote's telemetry stays off

import numpy as np
import torch

from parley.core.audio import SAMPLE_RATE
from parley.core.speaker_masks import FrameGrid
from parley.core.speaker_names import KnownSpeaker, named_voices, voice_audio
from parley.core.speaker_timeline import Turn

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
    to rounding (bench/README.md, "Speaker labelling": steps per second); on a GPU,
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


@dataclass
class SpeakerModels:
    """The ``SpeakerModel`` of ``parley.core.stream_diarizer``: numpy in, numpy out."""

    segmentation: torch.nn.Module
    embedder: Embedder
    label: str
    grid: FrameGrid
    device: torch.device
    pipeline: object | None = None  # a pyannote pipeline's own offline algorithm, if loaded

    def embed(self, window: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """(local, dim) embeddings of ``window`` under each (samples,) mask; NaN rows for
        speakers with too little audio."""
        return self.embedder(torch.from_numpy(window), torch.from_numpy(masks))

    def name_voices(
        self, audio: np.ndarray, turns: Sequence[Turn], known: Sequence[KnownSpeaker]
    ) -> dict[int, str]:
        """Speaker → name, for the recording's voices that match a known speaker's clip
        (``core.speaker_names``): each voice embedded from its own turns."""

        def embedded(clip: np.ndarray) -> np.ndarray:
            clip = clip.astype(np.float32)
            return self.embed(clip, np.ones((1, len(clip)), bool))[0]

        references = [(k.name, embedded(k.audio)) for k in known]
        speakers = sorted({t.speaker for t in turns})
        voices = {s: embedded(voice_audio(audio, turns, s)) for s in speakers}
        return named_voices(voices, references)

    def diarize_recording(
        self, audio: np.ndarray, config, clustering, count, step_s: float, on_heard=None
    ):
        """Who spoke when in a whole recording (a ``TimelineSnapshot``): a pyannote
        pipeline's own offline algorithm when one was loaded; else every window's
        speakers clustered at once (``core.recording_speakers``), or, for a recording too
        short to cluster so (``diarized_live``), the live linking a stream of it keeps.
        ``on_heard`` is told the share of the recording its windows have heard."""
        from parley.core.recording_speakers import diarize_windows
        from parley.core.whole_recording import (
            diarized_live,
            observe_recording,
            replay_recording,
        )

        if self.pipeline is not None:
            return _pipeline_snapshot(self.pipeline, audio, count)
        if diarized_live(len(audio) / SAMPLE_RATE, config.window_s, count):
            return replay_recording(self, audio, config.for_count(count), on_heard)
        windows = observe_recording(self, audio, config, step_s, on_heard)
        return diarize_windows(windows, self.grid.step, clustering.for_step(step_s), count)

    @torch.inference_mode()
    def segment(self, windows: list[np.ndarray]) -> list[np.ndarray]:
        """Local speaker activity of each window: (frames, local speakers) probabilities in
        [0, 1]. Windows of one length go through the network together (the same numbers
        as one at a time, in less time a window)."""
        by_length: dict[int, list[int]] = {}
        for i, window in enumerate(windows):
            by_length.setdefault(len(window), []).append(i)
        out: list[np.ndarray] = [np.zeros((0, 0), np.float32)] * len(windows)
        for indices in by_length.values():
            batch = torch.from_numpy(np.stack([windows[i] for i in indices]))[:, None]
            activity = self._activity(batch.to(self.device)).float().cpu().numpy()
            for row, i in enumerate(indices):
                out[i] = activity[row]
        return out

    def _activity(self, waveforms: torch.Tensor) -> torch.Tensor:
        from pyannote.audio.utils.powerset import Powerset

        output = self.segmentation(waveforms)
        spec = self.segmentation.specifications
        if spec.powerset:
            powerset = Powerset(len(spec.classes), spec.powerset_max_classes).to(self.device)
            output = powerset.to_multilabel(output, soft=True)
        return output


def _pipeline_snapshot(pipeline, audio: np.ndarray, count):
    """A pyannote pipeline's diarization of ``audio``, as a settled snapshot (speakers
    numbered by first appearance)."""
    from parley.core.speaker_timeline import TimelineSnapshot, Turn

    output = pipeline(
        {"waveform": torch.from_numpy(audio)[None], "sample_rate": SAMPLE_RATE},
        num_speakers=count.exactly,
        min_speakers=count.at_least,
        max_speakers=count.at_most,
    )
    annotation = getattr(output, "speaker_diarization", output)  # pyannote 4 wraps it
    order: dict[str, int] = {}
    turns = []
    for segment, _, label in annotation.itertracks(yield_label=True):
        speaker = order.setdefault(label, len(order))
        turns.append(Turn(float(segment.start), float(segment.end), speaker))
    end = len(audio) / SAMPLE_RATE
    return TimelineSnapshot(tuple(turns), end, len(order), (), end)


def _grid_of(model) -> FrameGrid:
    field = model.receptive_field
    return FrameGrid(field.step, field.start)


def load_speaker_models(source: str, models_dir: Path, device: torch.device) -> SpeakerModels:
    """``bundle``, a pyannote pipeline directory, or a pyannote hub pipeline id."""
    from pyannote.audio import Model

    if source == "bundle":
        from parley.weights.bundle import DIARIZATION, verify

        directory = models_dir / DIARIZATION.name
        problems = verify(directory)
        if problems:
            raise FileNotFoundError(
                f"the diarization bundle is not installed in {models_dir} "
                f"({problems[0]}); run `parley models install`"
            )
        segmentation = (
            Model.from_pretrained(str(directory / "segmentation" / "pytorch_model.bin"))
            .to(device)
            .eval()
        )
        embed = CamPlusPlusEmbedder(directory / "campplus", device)
        return SpeakerModels(segmentation, embed, "bundle", _grid_of(segmentation), device)
    pipeline = _load_pipeline(source)
    segmentation = pipeline._segmentation.model.to(device).eval()
    embedding = pipeline._embedding
    embedding.to(device)
    return SpeakerModels(
        segmentation,
        PyannoteEmbedder(embedding),
        source,
        _grid_of(segmentation),
        device,
        pipeline=pipeline.to(device),
    )


def _load_pipeline(source: str):
    from pyannote.audio import Pipeline

    if Path(source).expanduser().exists():
        return Pipeline.from_pretrained(str(Path(source).expanduser()))
    token = os.environ.get("HF_TOKEN")
    if not token:
        raise RuntimeError(
            f"diarization pipeline {source!r} is on the Hugging Face hub and "
            "gated: set HF_TOKEN in the environment (its value is never logged)"
        )
    try:
        pipeline = Pipeline.from_pretrained(source, token=token)
    except Exception as exc:  # the hub's own errors say more than we could
        raise RuntimeError(
            f"could not load diarization pipeline {source!r}: "
            f"{type(exc).__name__} (check HF_TOKEN and that you accepted the "
            "model's conditions on the hub)"
        ) from None
    if pipeline is None:
        raise RuntimeError(f"could not load diarization pipeline {source!r}: is HF_TOKEN valid?")
    return pipeline
