"""Speaker models for streaming diarization: local segmentation and speaker embeddings
(the embedders in ``embedders``), and a recording's speakers through them.

Only the diarization worker imports this module, so a server without diarization
never imports pyannote. Two sources:

- ``bundle``: pyannote segmentation-3.0 and CAM++ (3D-Speaker) from the offline bundle
  (on a CPU both in ONNX Runtime, so that once their exports are kept a server never
  imports pyannote.audio either);
- a pyannote pipeline (hub id with ``HF_TOKEN`` from the environment, or a local
  directory): its segmentation model and its speaker-embedding model.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "false")  # pyannote's telemetry stays off

import numpy as np
import torch

from parley.core.audio import SAMPLE_RATE
from parley.core.speaker_masks import FrameGrid
from parley.core.speaker_names import KnownSpeaker, embedded_clip, named_voices, voice_audio
from parley.core.speaker_timeline import Turn
from parley.models.embedders import CamPlusPlusEmbedder, Embedder, PyannoteEmbedder
from parley.models.segmentation import Segmentation, TorchSegmentation, bundle_segmentation

log = logging.getLogger(__name__)


@dataclass
class SpeakerModels:
    """The ``SpeakerModel`` of ``parley.core.stream_diarizer``: numpy in, numpy out."""

    segmentation: Segmentation
    embedder: Embedder
    label: str
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

        references = [(k.name, embedded_clip(self.embed, k.audio)) for k in known]
        speakers = sorted({t.speaker for t in turns})
        voices = {s: embedded_clip(self.embed, voice_audio(audio, turns, s)) for s in speakers}
        return named_voices(voices, references)

    def diarize_recording(
        self,
        audio: np.ndarray,
        config,
        clustering,
        count,
        step_s: float,
        on_heard=None,
        live_first=None,
    ):
        """Who spoke when in a whole recording (a ``TimelineSnapshot``): a pyannote
        pipeline's own offline algorithm when one was loaded; else every window's
        speakers clustered at once (``core.recording_speakers``), or, for a recording too
        short to cluster so (``diarized_live``), the live linking a stream of it keeps.
        ``on_heard`` is told the share of the recording its windows have heard;
        ``live_first`` is called before each window (not by a pipeline, which runs
        whole)."""
        from parley.core.recording_speakers import diarize_windows
        from parley.core.whole_recording import diarized_live, replay_recording

        if self.pipeline is not None:
            return _pipeline_snapshot(self.pipeline, audio, count)
        if diarized_live(len(audio) / SAMPLE_RATE, config.window_s, count):
            return replay_recording(self, audio, config.for_count(count), on_heard, live_first)
        windows = self._observe_recording(audio, config, step_s, on_heard, live_first)
        return diarize_windows(windows, self.grid.step, clustering.for_step(step_s), count)

    def _observe_recording(self, audio: np.ndarray, config, step_s: float, on_heard, live_first):
        """``observe_recording`` shared among as many threads as there are cores (torch's
        count), each with one torch thread of its own, as every model thread sets: they
        inherit the caller's priority, so they take only what live work leaves (a
        recording's words need one core at most, and none once decoded)."""
        from parley.core.whole_recording import observe_recording
        from parley.models.device import DEFAULT_THREADS, set_threads

        threads = DEFAULT_THREADS
        shares = [0.0] * threads

        def part(k: int) -> list:
            def heard(share: float) -> None:
                shares[k] = share
                if on_heard is not None:
                    on_heard(sum(shares) / threads)

            return observe_recording(self, audio, config, step_s, heard, (k, threads), live_first)

        with concurrent.futures.ThreadPoolExecutor(
            threads, "parley-speakers", initializer=set_threads, initargs=(1,)
        ) as pool:
            return [window for observed in pool.map(part, range(threads)) for window in observed]

    @property
    def grid(self) -> FrameGrid:
        return self.segmentation.grid

    def segment(self, windows: list[np.ndarray]) -> list[np.ndarray]:
        """Local speaker activity of each window: (frames, local speakers) probabilities in
        [0, 1]. Windows of one length go through the network together (the same numbers
        as one at a time, in less time a window)."""
        by_length: dict[int, list[int]] = {}
        for i, window in enumerate(windows):
            by_length.setdefault(len(window), []).append(i)
        out: list[np.ndarray] = [np.zeros((0, 0), np.float32)] * len(windows)
        for indices in by_length.values():
            batch = np.stack([windows[i] for i in indices]).astype(np.float32, copy=False)[:, None]
            activity = self.segmentation(batch)
            for row, i in enumerate(indices):
                out[i] = activity[row]
        return out


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


def load_speaker_models(source: str, models_dir: Path, device: torch.device) -> SpeakerModels:
    """``bundle``, a pyannote pipeline directory, or a pyannote hub pipeline id."""
    if device.type == "cuda":
        # cuDNN rounds float32 convolutions to TF32 by default, and a meeting's count then
        # differed from the CPU's (bench/diarization_gpu.py: 11 of 12 alike, 12 of 12 in
        # float32). Whisper runs in fp16 on a GPU, which this does not touch.
        torch.backends.cudnn.allow_tf32 = False
    if source == "bundle":
        from parley.weights.bundle import DIARIZATION, verify

        directory = models_dir / DIARIZATION.name
        problems = verify(directory)
        if problems:
            raise FileNotFoundError(
                f"the diarization bundle is not installed in {models_dir} "
                f"({problems[0]}); run `parley models install`"
            )
        segmentation = bundle_segmentation(directory / "segmentation", device)
        embed = CamPlusPlusEmbedder(directory / "campplus", device)
        return SpeakerModels(segmentation, embed, "bundle")
    pipeline = _load_pipeline(source)
    embedding = pipeline._embedding
    embedding.to(device)
    return SpeakerModels(
        TorchSegmentation(pipeline._segmentation.model, device),
        PyannoteEmbedder(embedding),
        source,
        pipeline=pipeline.to(device),
    )


def keep_cpu_exports(models_dir: Path) -> bool:
    """Make the bundle's ONNX exports now, beside the weights ``parley models install``
    put there (where a server may not write later: an image's models directory), so
    that every start reads them and none imports pyannote.audio. False where the bundle
    or pyannote.audio (the ``diarization`` extra) is not installed."""
    import importlib.util

    from parley.weights.bundle import DIARIZATION, verify

    if verify(models_dir / DIARIZATION.name) or not importlib.util.find_spec("pyannote.audio"):
        return False
    load_speaker_models("bundle", models_dir, torch.device("cpu"))
    return True


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
