"""Speakers in recordings sent whole, over real HTTP on loopback, with the real tiny.en
and bundled speaker models: /predict as the reference handler's README sends it,
deepgram-sdk's transcribe_file, and exact speaker counts of espeak meetings."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import requests
from pyannote.core import Annotation, Segment
from pyannote.database.util import load_rttm

from audio_fixtures import (
    DIALOGUE_LINES,
    PLAIN_VOICES,
    SAMPLE_WAV,
    SPEAKERS,
    conversation,
    der,
    dialogue,
    sample_dir,
    speak,
    wer,
    word_turns,
    write_wav,
)
from conftest import chunks_of, deepgram_environment
from parley.client.stream import run_stream, stream_url
from parley.protocol.messages import StreamConfig


async def test_predict_as_the_reference_readme_sends_it(diarized_base):
    """requests' multipart POST to /predict, exactly as the reference server's README:
    its answer's shapes; sample.wav's speakers (30 s: labelled as a stream of it is):
    words' turns (from /v1/listen's words, 0.25 s collar) with DER 0.071, against the
    live path's 0.074;
    batch_size and assisted reported, not obeyed; an unknown parameter ignored with a
    warning."""

    def post():
        files = {"file": open(SAMPLE_WAV, "rb")}
        data = {"parameters": json.dumps({"batch_size": 1, "assisted": "true", "temperature": 0.3})}
        return requests.post(f"{diarized_base}/predict", files=files, data=data, timeout=120)

    response = await asyncio.to_thread(post)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert set(answer) >= {"speakers", "chunks", "text"}
    assert all(len(c["timestamp"]) == 2 and c["text"] for c in answer["chunks"])
    times = [t for part in answer["chunks"] + answer["speakers"] for t in part["timestamp"]]
    assert times == [round(t, 3) for t in times]  # milliseconds, as every wire's times
    assert {s["speaker"] for s in answer["speakers"]} == {"SPEAKER_00", "SPEAKER_01"}
    assert answer["parley"]["parameters"]["batch_size"] == 1
    assert answer["parley"]["warnings"] == ["unknown parameter 'temperature' ignored"]
    assert answer["parley"]["decode"]["windows"] >= 1
    listened = await asyncio.to_thread(
        requests.post,
        f"{diarized_base}/v1/listen?diarize=true&punctuate=true",
        data=SAMPLE_WAV.read_bytes(),
        headers={"Content-Type": "audio/wav"},
        timeout=120,
    )
    words = listened.json()["results"]["channels"][0]["alternatives"][0]["words"]
    reference = load_rttm(str(sample_dir() / "sample.rttm"))["sample"]
    assert der(reference, word_turns(words)) <= 0.08  # 0.071 here; the live path's 0.074


async def _transcribe_file(base: str, path, **options):
    """deepgram-sdk's pre-recorded ``transcribe_file`` of ``path`` against the server."""
    from deepgram import DeepgramClient

    client = DeepgramClient(api_key="unused", environment=deepgram_environment(base))
    return await asyncio.to_thread(
        client.listen.v1.media.transcribe_file,
        request=path.read_bytes(),
        model="nova-3",
        **options,
    )


@pytest.fixture(scope="module")
def stereo_call(tmp_path_factory):
    """A call recorded in stereo, the agent on the left and the caller on the right,
    taking turns: the file and the turns."""
    audio, truth = conversation([(v, line) for v, line in zip(PLAIN_VOICES * 2, DIALOGUE_LINES)])
    stereo = np.zeros((2, len(audio)), dtype=np.float32)
    for turn in truth:  # each turn on its speaker's channel alone
        where = slice(int((turn.start - 0.3) * 16000), int((turn.end + 0.3) * 16000))
        stereo[PLAIN_VOICES.index(turn.voice), where] = audio[where]
    return write_wav(tmp_path_factory.mktemp("call") / "call.wav", stereo), truth


async def test_deepgram_sdk_multichannel_transcribes_each_channel(diarized_base, stereo_call):
    """deepgram-sdk's transcribe_file with multichannel: on the stereo call each
    channel's words are its own speaker's (WER against that speaker's lines), and the
    utterances come in time order, each naming its channel; without multichannel the
    file is one channel."""
    path, truth = stereo_call
    response = await _transcribe_file(
        diarized_base, path, multichannel=True, utterances=True, punctuate=True
    )
    assert response.metadata.channels == 2 and len(response.results.channels) == 2
    for channel, voice in zip(response.results.channels, PLAIN_VOICES):
        said = " ".join(turn.text for turn in truth if turn.voice == voice)
        assert wer(said, channel.alternatives[0].transcript) < 0.2, (voice, channel)
    utterances = response.results.utterances
    assert [u.channel for u in utterances] == [0, 1, 0, 1]
    assert [u.start for u in utterances] == sorted(u.start for u in utterances)
    mixed = await _transcribe_file(diarized_base, path)
    assert mixed.metadata.channels == 1 and len(mixed.results.channels) == 1


async def test_assemblyai_sdk_multichannel_labels_each_channels_speakers(
    diarized_base, stereo_call
):
    """assemblyai's Transcriber with multichannel and speaker_labels on the stereo call:
    two audio channels; each channel's words read its speaker's lines and carry that
    channel and its one voice's label there ("1A" on the left, "2A" on the right), as
    AssemblyAI labels a channel's speakers; the utterances alternate sides in time order."""
    import assemblyai as aai

    path, truth = stereo_call
    settings = aai.Settings(api_key="unused", base_url=diarized_base, polling_interval=0.1)
    transcriber = aai.Transcriber(client=aai.Client(settings=settings))
    config = aai.TranscriptionConfig(multichannel=True, speaker_labels=True)
    got = await asyncio.to_thread(transcriber.transcribe, str(path), config)
    assert got.status == aai.TranscriptStatus.completed, got.error
    assert got.json_response["audio_channels"] == 2
    for channel, voice in zip("12", PLAIN_VOICES):
        said = " ".join(turn.text for turn in truth if turn.voice == voice)
        words = [w for w in got.words if w.channel == channel]
        assert wer(said, " ".join(w.text for w in words)) < 0.2, (voice, words)
        assert {w.speaker for w in words} == {f"{channel}A"}
    assert [(u.channel, u.speaker) for u in got.utterances] == [("1", "1A"), ("2", "2A")] * 2


async def test_deepgram_sdk_transcribe_file_with_speakers_and_utterances(diarized_base, tmp_path):
    """deepgram-sdk's pre-recorded transcribe_file: an espeak meeting of three voices with
    known text and turns; three speakers, utterances, words in order, and paragraphs (one
    per turn here: each turn is another speaker's) with their sentences."""
    audio, truth = dialogue(["A", "B", "C"], turns=6)
    path = write_wav(tmp_path / "three.wav", audio)
    response = await _transcribe_file(
        diarized_base, path, diarize=True, utterances=True, punctuate=True, paragraphs=True
    )
    alternative = response.results.channels[0].alternatives[0]
    live = await run_stream(
        stream_url(f"ws://{diarized_base[7:]}/v1/stream", StreamConfig(), None),
        chunks_of(audio),
        32000,
        fast=True,
    )
    said = " ".join(u.text for u in truth)
    assert wer(said, alternative.transcript) <= wer(
        said, " ".join(f.text for f in live.finals)
    )  # here 0.22 against 0.35
    assert len({w.speaker for w in alternative.words}) == 3
    assert response.results.utterances and response.metadata.duration > 10
    paragraphs = alternative.paragraphs
    said_by = [SPEAKERS[v] for v in ["A", "B", "C"] * 2]
    assert len(paragraphs.paragraphs) == len(truth) == len(said_by)
    assert len({p.speaker for p in paragraphs.paragraphs}) == 3
    assert sum(p.num_words for p in paragraphs.paragraphs) == len(alternative.words)
    for paragraph, turn in zip(paragraphs.paragraphs, truth):
        # cut at . ? ! only (the model may leave a turn's last sentence open)
        assert paragraph.sentences
        assert all(x.text.endswith((".", "?", "!")) for x in paragraph.sentences[:-1])
        assert not any(c in x.text[:-1] for x in paragraph.sentences for c in ".?!")
        assert abs(paragraph.start - turn.start) < 1.0, (paragraph, turn)
    assert (
        paragraphs.transcript.startswith("\nSpeaker ") and "\n\nSpeaker " in paragraphs.transcript
    )
    # utterances: one per speaker's run here (the turns' 0.6 s gaps are under utt_split's
    # 0.8); without speakers and with utt_split=2, the whole meeting is one
    utterances = response.results.utterances
    assert [u.speaker for u in utterances] == [p.speaker for p in paragraphs.paragraphs]
    whole = await _transcribe_file(diarized_base, path, utterances=True, utt_split=2.0)
    (one,) = whole.results.utterances
    assert len(one.words) == len(whole.results.channels[0].alternatives[0].words)
    refused = await asyncio.to_thread(
        requests.post,
        f"{diarized_base}/v1/listen?utterances=true&utt_split=soon",
        data=path.read_bytes(),
        timeout=60,
    )
    assert refused.status_code == 400 and "utt_split" in refused.json()["err_msg"]
    reference = Annotation()
    for k, u in enumerate(truth):
        reference[Segment(u.start, u.end), k] = u.voice
    assert der(reference, word_turns([w.dict() for w in alternative.words])) < 0.2


VOICES = [SPEAKERS["A"], SPEAKERS["B"], SPEAKERS["C"], "en-us+f3"]


async def predict(base: str, path, parameters: dict) -> requests.Response:
    """POST ``path`` to /predict with these parameters, as the reference handler takes them."""
    return await asyncio.to_thread(
        requests.post,
        f"{base}/predict",
        files={"file": path.open("rb")},
        data={"parameters": json.dumps(parameters)},
        timeout=120,
    )


@pytest.mark.parametrize("count", [2, 3, 4])
async def test_whole_file_speaker_counts(diarized_base, count, tmp_path):
    """espeak meetings of 2, 3 and 4 voices: the exact count, with and without
    num_speakers."""
    audio, _ = conversation(
        [(VOICES[i % count], DIALOGUE_LINES[i % len(DIALOGUE_LINES)]) for i in range(2 * count)],
        gap_s=0.6,
    )
    voices = VOICES[:count]
    path = write_wav(tmp_path / f"{len(voices)}.wav", audio)
    for parameters in ({}, {"num_speakers": len(voices)}):
        response = await predict(diarized_base, path, parameters)
        assert response.status_code == 200
        assert len({s["speaker"] for s in response.json()["speakers"]}) == len(voices)


@pytest.mark.parametrize("seconds, parameters", [(40.0, {}), (0.3, {"num_speakers": 2})])
async def test_a_recording_with_nobody_heard_is_answered_without_speakers(
    diarized_base, seconds, parameters, tmp_path
):
    """Silence long enough to be clustered, and a clip too short for any window, with a
    count asked for: 200, no words and no speakers (the clustering was handed no voice
    and failed with a 500)."""
    path = write_wav(tmp_path / "silence.wav", np.zeros(int(seconds * 16000), np.float32))
    response = await predict(diarized_base, path, parameters)
    assert response.status_code == 200, response.text
    assert response.json()["speakers"] == [] and response.json()["text"].strip() == ""


async def test_known_speakers_name_their_voices(diarized_base, tmp_path):
    """OpenAI's known_speaker_names[] and known_speaker_references[] (data URLs of 2 to
    10 s clips; here other sentences than the meeting's), through the openai package: in
    a meeting of three espeak voices, two of them known, their segments carry the names
    and the third voice an S label; a reference of a voice not in the meeting names
    nobody. Names that do not pair with references, and a clip under 2 s, are refused."""
    import base64

    from openai import BadRequestError, OpenAI

    audio, truth = conversation(
        [(VOICES[i % 3], DIALOGUE_LINES[i % len(DIALOGUE_LINES)]) for i in range(6)], gap_s=0.6
    )
    path = write_wav(tmp_path / "three.wav", audio)

    def reference(voice: str, text: str) -> str:
        clip = write_wav(tmp_path / "reference.wav", speak(text, voice)).read_bytes()
        return "data:audio/wav;base64," + base64.b64encode(clip).decode()

    sentence = "The quick brown fox jumps over the lazy dog near the river bank."
    client = OpenAI(base_url=f"{diarized_base}/v1", api_key="unused", max_retries=0)

    def transcribe(names: list[str], references: list[str]):
        return client.audio.transcriptions.create(
            model="gpt-4o-transcribe-diarize",
            file=path.open("rb"),
            response_format="diarized_json",
            known_speaker_names=names,
            known_speaker_references=references,
        )

    diarized = await asyncio.to_thread(
        transcribe,
        ["agent", "customer", "absent"],
        [
            reference(VOICES[0], sentence),
            reference(VOICES[1], sentence),
            reference(VOICES[3], sentence),
        ],
    )
    names = {VOICES[0]: "agent", VOICES[1]: "customer"}
    for segment in diarized.segments:
        said_by = max(
            truth, key=lambda u: min(u.end, segment.end) - max(u.start, segment.start)
        ).voice
        assert segment.speaker == names.get(said_by, segment.speaker), segment
        if said_by not in names:
            assert segment.speaker.startswith("S"), segment
    assert {s.speaker for s in diarized.segments} >= {"agent", "customer"}
    for names_given, references in (
        (["agent", "customer"], [reference(VOICES[0], sentence)]),
        (["agent"], [reference(VOICES[0], "Yes.")]),
    ):
        with pytest.raises(BadRequestError):
            await asyncio.to_thread(transcribe, names_given, references)
