"""Streaming diarization with the bundled models: accuracy, constraints, and the wire."""

import asyncio
import shutil
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch
from pyannote.core import Annotation, Segment
from pyannote.database.util import load_rttm

from audio_fixtures import (
    DIALOGUE_LINES,
    SAMPLE_RATE,
    SAMPLE_WAV,
    SPEAKERS,
    audible_span,
    der,
    dialogue,
    read_wav,
    sample_dir,
    silence,
    speak,
    words_of,
    write_wav,
)
from conftest import as_received, pcm16
from parley.client.stream import run_stream, stream_url
from parley.client.transcript import Transcript
from parley.core.stream_diarizer import DiarizationConfig, StreamDiarizer
from parley.models.speaker_models import load_speaker_models
from parley.protocol.messages import (
    Final,
    SpeakerNames,
    SpeakerUpdate,
    StreamConfig,
    known_speaker_message,
)


@pytest.fixture(scope="module")
def speaker_models(models_dir):
    """The bundled models, on one torch thread as the server's diarization thread runs them."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_speaker_models("bundle", models_dir, torch.device("cpu"))
    torch.set_num_threads(threads)


def diarize(models, audio, config=None, spy=None, phase_s=0.0):
    """Step through ``audio`` as the server does (window 5 s, step 0.5 s); settled turns."""
    diarizer = StreamDiarizer(models, config or DiarizationConfig())
    if spy is not None:
        assign = diarizer.clustering.assign
        diarizer.clustering.assign = lambda local, held=None: spy(assign(local, held)) or spy.last
    diarizer.replay(audio, phase_s)
    snapshot = diarizer.timeline.snapshot(diarizer.clustering.aliases())
    hypothesis = Annotation()
    for k, turn in enumerate(snapshot.turns):
        hypothesis[Segment(turn.start, turn.end), k] = turn.speaker
    assert snapshot.speaker_count == diarizer.clustering.speaker_count
    return hypothesis, snapshot.speaker_count


class MappingSpy:
    def __init__(self):
        self.mappings = []
        self.last = None

    def __call__(self, mapping):
        self.mappings.append(mapping)
        self.last = mapping


@pytest.mark.parametrize("phase_s", [0.0, 0.3])
def test_sample_two_speakers_and_der_at_default_latency(speaker_models, phase_s):
    """sample.wav: two speakers, DER ≤ 0.09 at the default latency (4 s: 0.04 and 0.08;
    2 s scored 0.11 and 0.08), no label used twice, with steps that start where a
    server's do when its client does."""
    spy = MappingSpy()
    hypothesis, count = diarize(speaker_models, read_wav(SAMPLE_WAV), spy=spy, phase_s=phase_s)
    reference = load_rttm(str(sample_dir() / "sample.rttm"))["sample"]
    assert count == 2
    assert der(reference, hypothesis) <= 0.09
    for mapping in spy.mappings:
        used = [g for g in mapping if g is not None]
        assert len(used) == len(set(used))  # two people in one window never share a label


def test_an_embedding_does_not_move_with_one_step_of_the_audio(speaker_models, tmp_path):
    """A voice with pauses of digital silence (espeak's, or a muted line's), embedded as
    synthesised and after a round trip through a 16-bit WAV file (what a client streams:
    its quietest samples become silence): the same speaker, within a cosine distance of
    0.01 (without fbank dither: 0.1), and the same audio twice gives the same embedding."""
    audio, _ = dialogue(["A", "B"], turns=1)
    window = audio[: int(5 * SAMPLE_RATE)]
    received = read_wav(write_wav(tmp_path / "a.wav", window))
    mask = np.ones((1, len(window)), dtype=bool)
    first, again, moved = (speaker_models.embed(w, mask)[0] for w in (window, window, received))
    assert np.array_equal(first, again)
    cosine = first @ moved / (np.linalg.norm(first) * np.linalg.norm(moved))
    assert 1.0 - cosine < 0.01


def test_the_speaker_models_run_in_onnx_runtime_as_in_torch(models_dir, tmp_path):
    """`parley models install` exports both bundled networks to ONNX beside their weights;
    on a CPU they run from those files, and give torch's numbers to rounding: every
    frame's activity, the grid its frames fall on, and each speaker's embedding."""
    from pyannote.audio import Model

    from parley.models.embedders import CamPlusPlusEmbedder
    from parley.models.segmentation import OnnxSegmentation, TorchSegmentation
    from parley.models.speaker_models import keep_cpu_exports

    assert not keep_cpu_exports(tmp_path)  # no bundle there: nothing to export
    directory = tmp_path / "diarization"
    shutil.copytree(models_dir / "diarization", directory, ignore=shutil.ignore_patterns("*.onnx"))
    assert keep_cpu_exports(tmp_path)
    assert len(list(directory.glob("*/*.onnx"))) == 2
    speaker_models = load_speaker_models("bundle", tmp_path, torch.device("cpu"))
    assert isinstance(speaker_models.segmentation, OnnxSegmentation)
    checkpoint = directory / "segmentation" / "pytorch_model.bin"
    torch_segmentation = TorchSegmentation(
        Model.from_pretrained(str(checkpoint)), torch.device("cpu")
    )
    assert speaker_models.grid == torch_segmentation.grid
    audio = read_wav(SAMPLE_WAV)
    windows = [audio[k * SAMPLE_RATE : (k + 5) * SAMPLE_RATE] for k in range(0, 25, 4)]
    onnx = speaker_models.segment(windows)
    for window, activity in zip(windows, onnx, strict=True):
        expected = torch_segmentation(window[None, None])[0]
        assert activity.shape == expected.shape and np.abs(activity - expected).max() < 1e-3

    in_torch = CamPlusPlusEmbedder(directory / "campplus", torch.device("cpu"))
    in_torch._session = None  # the same weights, run by torch as on a GPU
    window = torch.from_numpy(windows[2])
    masks = torch.from_numpy(onnx[2].argmax(axis=1) == np.arange(3)[:, None])
    masks = masks[:, speaker_models.grid.frame_of_samples(len(window), len(onnx[2]))]
    expected, got = in_torch(window, masks), speaker_models.embed(window.numpy(), masks.numpy())
    heard = ~np.isnan(expected[:, 0])
    assert heard.any() and np.array_equal(heard, ~np.isnan(got[:, 0]))
    cosine = (expected[heard] * got[heard]).sum(1) / (
        np.linalg.norm(expected[heard], axis=1) * np.linalg.norm(got[heard], axis=1)
    )
    assert cosine.min() > 0.9999, cosine


@pytest.mark.parametrize("voices, bound", [(["A", "B", "C"], 0.15)])
def test_synthetic_conversations(speaker_models, voices, bound):
    """An espeak-ng dialogue of three voices with known turns: the right number of speakers,
    bounded DER (two voices: test_speakers_on_the_wire)."""
    audio, truth = dialogue(voices, turns=6)
    reference = Annotation()
    for u in truth:
        reference[Segment(u.start, u.end)] = u.voice
    hypothesis, count = diarize(speaker_models, audio)
    assert count == len(voices)
    assert der(reference, hypothesis) <= bound


@pytest.fixture
def diarized_url(diarized_server):
    """The shared real server's stream URL, with speakers."""
    return stream_url(
        f"ws://127.0.0.1:{diarized_server.port}/v1/stream", StreamConfig(diarization=True), None
    )


async def test_speakers_on_the_wire(diarized_url):
    """With diarization=true, finals and words carry S1/S2 and speaker updates are well formed."""
    audio, truth = dialogue(["A", "B"], turns=4)
    pcm = (audio * 32767).astype("<i2").tobytes()

    async def chunks():
        for i in range(0, len(pcm), 3200):
            yield pcm[i : i + 3200]

    messages = []
    result = await run_stream(diarized_url, chunks(), 32000, fast=True, on_message=messages.append)
    assert result.errors == [] and result.started.config.diarization is True
    assert "diarization_latency_s" in result.started.limits
    finals = {}
    for message in messages:
        if isinstance(message, Final):
            finals[message.segment_id] = message
        elif isinstance(message, SpeakerUpdate):
            sent = finals[message.segment_id]  # only finals already sent are updated
            assert [w.word for w in message.words] == [w.word for w in sent.words]
            finals[message.segment_id] = replace(sent, speaker=message.speaker, words=message.words)
    labels = {w.speaker for f in finals.values() for w in f.words}
    assert labels == {"S1", "S2"}
    # Each true turn's words are mostly one label, and the two voices get different ones.
    by_voice = {}
    for u in truth:
        words = [
            w.speaker
            for f in finals.values()
            for w in f.words
            if u.start - 0.3 <= (w.start + w.end) / 2 <= u.end + 0.3
        ]
        top = max(set(words), key=words.count)
        assert words.count(top) >= 0.7 * len(words)
        by_voice.setdefault(u.voice, set()).add(top)
    assert all(len(v) == 1 for v in by_voice.values())
    assert len(set.union(*by_voice.values())) == 2


async def test_a_turn_taken_without_a_pause_ends_the_final_at_the_change(diarized_url):
    """Two voices back to back, no pause: once the change has settled, a final ends within
    0.3 s of it with reason speaker_change, each final holds one speaker, S1 before and
    S2 after, and the answer is transcribed (or, with the change found too late to cut,
    the final holds both, S1's words before it and S2's after, a voice the decode
    dropped decoded again alone). Sent in real time, as a
    speaker would: the cut needs the change settled while the segment is still open, and
    faster than real time a busy machine's diarization steps fall behind the audio (by
    design they skip while the next window still covers them)."""

    def voiced(text: str, voice: str) -> np.ndarray:
        audio = speak(text, SPEAKERS[voice])
        start, end = audible_span(audio)
        return audio[int(start * SAMPLE_RATE) : int(end * SAMPLE_RATE)]

    # B's two sentences without espeak's pause between them: 7.5 s in one segment, so
    # that the cut comes before that segment ends though a busy machine's steps lag.
    speech = [
        voiced(DIALOGUE_LINES[0] + " " + DIALOGUE_LINES[2], "A"),
        np.concatenate([voiced(DIALOGUE_LINES[1], "B"), voiced(DIALOGUE_LINES[3], "B")]),
    ]
    audio = np.concatenate([silence(0.5), *speech, silence(1.5)])
    change = 0.5 + len(speech[0]) / SAMPLE_RATE
    pcm = (audio * 32767).astype("<i2").tobytes()

    async def chunks():
        for i in range(0, len(pcm), 3200):
            await asyncio.sleep(0.1)
            yield pcm[i : i + 3200]

    messages = []
    result = await run_stream(diarized_url, chunks(), 32000, fast=True, on_message=messages.append)
    assert result.errors == []
    transcript = Transcript()
    for message in messages:
        transcript.apply(message)
    finals = [f for f in transcript.finals if f.words]
    cuts = [f for f in finals if f.reason == "speaker_change"]
    if cuts:  # the change was found in time (diarization.max_cut_age_s): cut there
        assert len(cuts) == 1 and abs(cuts[0].end - change) <= 0.3
        assert [{w.speaker for w in f.words} for f in finals] == [
            {"S1"} if f.end <= cuts[0].end else {"S2"} for f in finals
        ]
    else:  # found too late on a busy machine: left in the final, its words parted there
        words = [w for f in finals for w in f.words if abs((w.start + w.end) / 2 - change) > 0.3]
        assert [w.speaker for w in words] == [
            "S1" if (w.start + w.end) / 2 < change else "S2" for w in words
        ]
    answer = " ".join(w.word for f in finals for w in f.words if w.start > change - 0.3)
    assert "questions" in words_of(answer)  # the answer is heard, not dropped


@pytest.mark.parametrize("count, labels", [({"max_speakers": 2}, 2), ({"num_speakers": 3}, 3)])
async def test_a_speaker_count_given_bounds_the_labels(diarized_server, count, labels):
    """A three-voice meeting long enough for the closing relabel (about 40 s): told
    max_speakers=2, the client's transcript (every speaker_update applied) holds two
    labels; told num_speakers=3, three. The count reaches both the live linking and the
    closing relabel."""
    audio, _ = dialogue(["A", "B", "C"], turns=12)
    assert len(audio) / SAMPLE_RATE >= 30  # the closing relabel runs
    url = stream_url(
        f"ws://127.0.0.1:{diarized_server.port}/v1/stream",
        StreamConfig(diarization=True, **count),
        None,
    )
    pcm = (audio * 32767).astype("<i2").tobytes()

    async def chunks():
        for i in range(0, len(pcm), 3200):
            yield pcm[i : i + 3200]

    transcript = Transcript()
    result = await run_stream(url, chunks(), 32000, fast=True, on_message=transcript.apply)
    assert result.errors == [] and result.started.config.speaker_count.at_most in (2, None)
    shown = {w.speaker for f in transcript.finals for w in f.words}
    assert shown == {f"S{k}" for k in range(1, labels + 1)}


def test_diarization_off_and_the_kept_bundle_never_import_pyannote(
    speaker_models, models_dir, tmp_path
):
    """A server with diarization off runs a session without importing pyannote at all;
    the bundled speaker models, once their exports are kept (``speaker_models`` loaded
    them), segment and embed without it too."""
    script = tmp_path / "probe.py"
    script.write_text(f"""
import asyncio, json, sys
from parley.app import start_server
from parley.loading import load_asr, load_diarization
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
from pathlib import Path
import numpy, torch
from parley.models.speaker_models import load_speaker_models

models = load_speaker_models("bundle", Path({str(models_dir)!r}), torch.device("cpu"))
window = (numpy.random.default_rng(0).standard_normal(80000) * 0.1).astype(numpy.float32)
(activity,) = models.segment([window])
models.embed(window, numpy.ones((1, len(window)), bool))
print(activity.shape, sorted(m for m in sys.modules if m.startswith("pyannote")))
""")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-2:] == ["[]", "(293, 3) []"]


def _wav(audio) -> bytes:
    import io
    import wave

    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm16(audio))
    return buffer.getvalue()


async def test_a_known_speakers_clip_names_the_label_of_that_voice(diarized_server):
    """A ``known_speaker`` clip of one of sample.wav's two voices names the label that
    voice has (``speaker_names``), and nobody else's, before the stream ends; a clip
    refused (too short, a name twice, past 8 clips, on a stream without speakers) is a
    bad_message, and the stream goes on."""
    import json

    from websockets.asyncio.client import connect

    audio = read_wav(SAMPLE_WAV)
    host = _wav(audio[int(21.8 * 16000) : int(27.8 * 16000)])  # its second voice
    base = f"ws://127.0.0.1:{diarized_server.port}/v1/stream"
    async with connect(base) as plain:  # no speakers: refused, the stream goes on
        assert json.loads(await plain.recv())["type"] == "session_started"
        await plain.send(known_speaker_message("host", host))
        error = json.loads(await plain.recv())
        assert (error["code"], "diarization=true" in error["message"]) == ("bad_message", True)
        await plain.send(json.dumps({"type": "end_of_stream"}))
        assert json.loads(await plain.recv())["type"] == "session_ended"
    messages = []
    pcm = pcm16(audio)

    async def chunks():
        for i in range(0, len(pcm), 6400):
            yield pcm[i : i + 6400]

    short = _wav(audio[:16000])
    known = [("host", host), ("short", short), ("host", host)] + [("short", short)] * 7
    result = await run_stream(
        base + "?diarization=true",
        chunks(),
        32000,
        fast=True,
        on_message=messages.append,
        known_speakers=known,
    )
    errors = [e.message for e in result.errors]
    assert all(e.code.value == "bad_message" for e in result.errors), errors
    assert len(errors) == 9 and all("known_speaker refused" in e for e in errors), errors
    assert "2 to 10 s" in errors[0] and "each known speaker name once" in errors[1]
    assert "at most 8 clips" in errors[-1]  # the ninth sent: each is a decode
    transcript = Transcript()
    for message in messages:
        transcript.apply(message)
    # the words of the voice the clip was cut from show its name; the other voice's, its label
    at_24 = {w.speaker for f in transcript.finals for w in f.words if 23.0 <= w.start <= 25.0}
    assert at_24 == {"host"} and list(transcript.names.values()) == ["host"], transcript.names
    assert transcript.speakers() == ["S1", "host"]
    named = [i for i, m in enumerate(messages) if isinstance(m, SpeakerNames)]
    assert named and named[-1] < len(messages) - 1  # told before session_ended


async def test_a_known_speaker_message_carries_its_clip_as_a_data_url(tmp_path):
    """The client's ``known_speaker`` message decodes, on the server's side, to the clip
    it was made from; what is no data URL, or no base64, is refused with the reason."""
    import json

    from parley.transport.known_speakers import reference_clip

    clip = read_wav(SAMPLE_WAV)[: 3 * 16000]
    message = json.loads(known_speaker_message("host", _wav(clip)))
    assert (message["type"], message["name"]) == ("known_speaker", "host")
    decoded = await reference_clip("host", message["audio"])
    assert len(decoded) == len(clip) and np.abs(decoded - as_received(clip)).max() < 1e-3
    with pytest.raises(ValueError, match="no base64 data URL"):
        await reference_clip("host", "https://example.com/host.wav")
    with pytest.raises(ValueError, match="not valid base64"):
        await reference_clip("host", "data:audio/wav;base64,@@@")
