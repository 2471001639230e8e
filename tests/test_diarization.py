"""Streaming diarization with the bundled models: accuracy, constraints, and the wire."""

import subprocess
import sys

import pytest
import torch
from pyannote.core import Annotation, Segment
from pyannote.database.util import load_rttm
from pyannote.metrics.diarization import DiarizationErrorRate

from audio_fixtures import SAMPLE_WAV, dialogue, read_wav, sample_dir
from conftest import serve_real
from parley.client.stream import run_stream, stream_url
from parley.models.speaker_models import load_speaker_models
from parley.protocol.messages import StreamConfig
from parley.runtime.diarization import DiarizationConfig, StreamDiarizer



@pytest.fixture(scope="module")
def speaker_models(models_dir):
    """The bundled models, on one torch thread as the server's diarization thread runs them."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_speaker_models("bundle", models_dir, torch.device("cpu"))
    torch.set_num_threads(threads)


def diarize(models, audio, config=DiarizationConfig(), spy=None):
    """Step through ``audio`` as the server does (window 5 s, step 0.5 s); settled turns."""
    diarizer = StreamDiarizer(models, config)
    if spy is not None:
        assign = diarizer.clustering.assign
        diarizer.clustering.assign = lambda e, a: spy(assign(e, a)) or spy.last
    diarizer.replay(audio)
    hypothesis = Annotation()
    for turn in diarizer.timeline.settled_turns():
        hypothesis[Segment(turn.start, turn.end)] = turn.speaker
    return hypothesis, diarizer.clustering.speaker_count


def der(reference, hypothesis):
    return DiarizationErrorRate(collar=0.25, skip_overlap=False)(reference, hypothesis)


class MappingSpy:
    def __init__(self):
        self.mappings = []
        self.last = None

    def __call__(self, mapping):
        self.mappings.append(mapping)
        self.last = mapping


def test_sample_two_speakers_and_der_at_default_latency(speaker_models):
    """sample.wav: two speakers, DER ≤ 0.20 at the default latency, no label used twice."""
    spy = MappingSpy()
    hypothesis, count = diarize(speaker_models, read_wav(SAMPLE_WAV), spy=spy)
    reference = load_rttm(str(sample_dir() / "sample.rttm"))["sample"]
    assert count == 2
    assert der(reference, hypothesis) <= 0.20
    for mapping in spy.mappings:
        used = [g for g in mapping if g is not None]
        assert len(used) == len(set(used))  # two people in one window never share a label


@pytest.mark.parametrize("voices, bound", [(["A", "B"], 0.20), (["A", "B", "C"], 0.30)])
def test_synthetic_conversations(speaker_models, voices, bound):
    """espeak-ng dialogues with known turns: the right number of speakers, bounded DER."""
    audio, truth = dialogue(voices, turns=6)
    reference = Annotation()
    for u in truth:
        reference[Segment(u.start, u.end)] = u.voice
    hypothesis, count = diarize(speaker_models, audio)
    assert count == len(voices)
    assert der(reference, hypothesis) <= bound


async def test_speakers_on_the_wire(models_dir):
    """With diarization=true, finals and words carry S1/S2 and speaker updates are well formed."""
    server = await serve_real(models_dir, diarization={"source": "bundle"})
    audio, truth = dialogue(["A", "B"], turns=4)
    pcm = (audio * 32767).astype("<i2").tobytes()

    async def chunks():
        for i in range(0, len(pcm), 3200):
            yield pcm[i:i + 3200]

    messages = []
    try:
        url = stream_url(f"ws://127.0.0.1:{server.port}/v1/stream",
                         StreamConfig(diarization=True), None)
        result = await run_stream(url, chunks(), 32000, fast=True, on_message=messages.append)
    finally:
        await server.stop()
    assert result.errors == [] and result.started["config"]["diarization"] is True
    assert "diarization_latency_s" in result.started["limits"]
    finals = {}
    for message in messages:
        if message["type"] == "final":
            finals[message["segment_id"]] = message
        elif message["type"] == "speaker_update":
            sent = finals[message["segment_id"]]  # only finals already sent are updated
            assert len(message["words"]) == len(sent["words"])
            assert [w["word"] for w in message["words"]] == [w["word"] for w in sent["words"]]
            sent.update(speaker=message["speaker"], words=message["words"])
    labels = {w["speaker"] for f in finals.values() for w in f["words"]}
    assert labels == {"S1", "S2"}
    # Each true turn's words are mostly one label, and the two voices get different ones.
    by_voice = {}
    for u in truth:
        words = [w["speaker"] for f in finals.values() for w in f["words"]
                 if u.start - 0.3 <= (w["start"] + w["end"]) / 2 <= u.end + 0.3]
        top = max(set(words), key=words.count)
        assert words.count(top) >= 0.7 * len(words)
        by_voice.setdefault(u.voice, set()).add(top)
    assert all(len(v) == 1 for v in by_voice.values())
    assert len(set.union(*by_voice.values())) == 2


def test_diarization_off_never_imports_pyannote(models_dir, tmp_path):
    """A server with diarization off runs a session without importing pyannote at all."""
    script = tmp_path / "probe.py"
    script.write_text(f"""
import asyncio, json, sys
from parley.app import load_asr, load_diarization, start_server
from parley.config import Settings
from websockets.asyncio.client import connect

async def main():
    settings = Settings(models_dir={str(models_dir)!r}, server={{"port": 0}})
    worker, asr = load_asr(settings)
    assert load_diarization(settings) is None
    server = await start_server(settings, worker, asr, warm_up=False)
    async with connect(f"ws://127.0.0.1:{{server.port}}/v1/stream") as ws:
        await ws.recv()
        await ws.send(bytes(32000))
        await ws.send(json.dumps({{"type": "end_of_stream"}}))
        async for _ in ws:
            pass
    await server.stop()
    print(sorted(m for m in sys.modules if m.startswith("pyannote")))

asyncio.run(main())
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
