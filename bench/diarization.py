"""Streaming diarization accuracy and cost, at several latencies, beside an offline reference.

Diarization error rate (pyannote.metrics, 0.25 s collar, overlap scored) of the
labels as they settle at each latency, on pyannote's sample.wav (two real speakers)
and on espeak-ng conversations with 2 and 3 voices and known turns. The offline
reference clusters whole-file embeddings of the same models (no latency limit: every
window is seen before any label is decided), which is what streaming gives up.

Usage: python bench/diarization.py [--latencies 0.5 1 2 5] [--threshold 0.6]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
import torch
from common import print_table, write_json

from audio_fixtures import SAMPLE_WAV, dialogue, read_wav, sample_dir
from parley.config import DiarizationSettings, Settings
from parley.core.speakers import ClusteringConfig
from parley.models.speaker_models import load_speaker_models
from parley.runtime.diarization import DiarizationConfig, StreamDiarizer
from pyannote.core import Annotation, Segment
from pyannote.database.util import load_rttm
from pyannote.metrics.diarization import DiarizationErrorRate

SAMPLE_RATE = 16000


def stream(models, audio: np.ndarray, config: DiarizationConfig):
    """Feed ``audio`` step by step, as the server does; return settled turns and step times."""
    diarizer = StreamDiarizer(models, config)
    times = diarizer.replay(audio)
    return diarizer.timeline.settled_turns(), diarizer.clustering.speaker_count, times


def annotation(turns) -> Annotation:
    out = Annotation()
    for turn in turns:
        out[Segment(turn.start, turn.end)] = f"S{turn.speaker}"
    return out


def truth_annotation(utterances) -> Annotation:
    out = Annotation()
    for u in utterances:
        out[Segment(u.start, u.end)] = u.voice
    return out


def der(reference: Annotation, hypothesis: Annotation) -> float:
    return DiarizationErrorRate(collar=0.25, skip_overlap=False)(reference, hypothesis)


def offline_reference(models, audio: np.ndarray, config: DiarizationConfig) -> tuple:
    """Latency unbounded: stream twice, the second pass starting from the first's speakers."""
    warm = StreamDiarizer(models, config)
    warm.replay(audio)
    second = StreamDiarizer(models, DiarizationConfig(
        config.window_s, config.step_s, config.window_s, config.clustering))
    second.clustering = warm.clustering  # every speaker already known from the whole file
    second.replay(audio)
    return second.timeline.settled_turns(), second.clustering.speaker_count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--latencies", type=float, nargs="+", default=[0.5, 1.0, 2.0, 5.0])
    parser.add_argument("--threshold", type=float, default=ClusteringConfig.new_speaker_distance)
    parser.add_argument("--threads", type=int, default=DiarizationSettings().threads,
                        help="torch threads, as the server's diarization thread uses")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    models = load_speaker_models("bundle", Settings().models_dir, torch.device("cpu"))
    sample_reference = load_rttm(str(sample_dir() / "sample.rttm"))["sample"]
    corpora = {"sample.wav": (read_wav(SAMPLE_WAV), sample_reference, 2)}
    for voices in (["A", "B"], ["A", "B", "C"]):
        audio, truth = dialogue(voices)
        corpora[f"espeak {len(voices)} voices"] = (audio, truth_annotation(truth), len(voices))
    clustering = ClusteringConfig(new_speaker_distance=args.threshold)
    stream(models, read_wav(SAMPLE_WAV)[: 6 * SAMPLE_RATE], DiarizationConfig())  # warm-up
    rows = []
    for name, (audio, reference, true_count) in corpora.items():
        for latency in args.latencies:
            config = DiarizationConfig(latency_s=latency, clustering=clustering)
            turns, count, times = stream(models, audio, config)
            rows.append({"audio": name, "latency_s": latency, "der": der(reference,
                                                                         annotation(turns)),
                         "speakers": count, "true_speakers": true_count,
                         "step_ms_mean": 1000 * statistics.fmean(times),
                         "step_ms_max": 1000 * max(times), "step_s": config.step_s})
        turns, count = offline_reference(models, audio, DiarizationConfig(clustering=clustering))
        rows.append({"audio": name, "latency_s": "offline", "der": der(reference,
                                                                       annotation(turns)),
                     "speakers": count, "true_speakers": true_count})
    print_table(rows, ["audio", "latency_s", "der", "speakers", "true_speakers",
                       "step_ms_mean", "step_ms_max"])
    path = write_json("diarization", {"threshold": args.threshold, "rows": rows})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
