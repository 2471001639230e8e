"""Recordings sent whole, over real HTTP on loopback: the vendors' own clients (openai,
deepgram-sdk, requests as the reference handler's README sends) against the real
tiny.en and bundled speaker models; every bad input of protocol.md §"Recordings" on the
fake engine."""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
from pathlib import Path

import httpx
import numpy as np
import pytest
import requests

from audio_fixtures import (
    SAMPLE_WAV,
    conversation,
    monologue,
    sample_reference_text,
    wer,
    write_wav,
)
from conftest import chunks_of, serve_fake
from parley.client.stream import run_stream, stream_url
from parley.core.keyterms import normalised
from parley.protocol.messages import StreamConfig
from parley.recordings.media import decode_file

KEY = "files-test-key"


@pytest.fixture(scope="module")
def openai_client(diarized_base):
    from openai import OpenAI

    return OpenAI(base_url=f"{diarized_base}/v1", api_key="unused", max_retries=0)


# ---------------------------------------------------------------- real models, real clients


async def test_openai_json_matches_the_live_path_and_verbose_words(diarized_base, openai_client):
    """openai's audio.transcriptions.create on sample.wav: json text with WER at most the
    live stream's on the same audio; verbose_json with segments and timed words."""
    reference = sample_reference_text()
    result = await asyncio.to_thread(
        openai_client.audio.transcriptions.create, model="whisper-1", file=SAMPLE_WAV.open("rb")
    )
    live = await run_stream(
        stream_url(f"ws://{diarized_base[7:]}/v1/stream", StreamConfig(), None),
        chunks_of(_wav_audio()),
        32000,
        fast=True,
    )
    live_text = " ".join(f.text for f in live.finals)
    assert wer(reference, result.text) <= wer(reference, live_text) + 1e-9
    assert wer(reference, result.text) < 0.2
    verbose = await asyncio.to_thread(
        openai_client.audio.transcriptions.create,
        model="whisper-1",
        file=SAMPLE_WAV.open("rb"),
        response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
    )
    assert verbose.language == "english" and abs(verbose.duration - 30.0) < 0.1
    assert verbose.segments and verbose.words
    starts = [w.start for w in verbose.words]
    assert starts == sorted(starts) and all(w.end >= w.start for w in verbose.words)
    assert " ".join(w.word for w in verbose.words).split() == verbose.text.split()
    # each segment carries its decode's signs, as Whisper's carry their window's: the
    # segments of one packed window share them, and speech reads as speech
    signs = {
        s.seek: (s.avg_logprob, s.no_speech_prob, s.compression_ratio) for s in verbose.segments
    }
    assert {s.temperature for s in verbose.segments} == {0.0}  # none doubted, none drawn
    assert all(len({s.avg_logprob for s in verbose.segments if s.seek == k}) == 1 for k in signs)
    assert all(s.seek <= round(s.start * 100) for s in verbose.segments)
    assert all(-1.0 < lp < 0 and 0 < nsp < 0.3 and 1.0 < cr < 2.4 for lp, nsp, cr in signs.values())


async def test_openai_srt_and_streamed_diarized_json(openai_client):
    srt = await asyncio.to_thread(
        openai_client.audio.transcriptions.create,
        model="whisper-1",
        file=SAMPLE_WAV.open("rb"),
        response_format="srt",
    )
    assert srt.startswith("1\n00:00:") and " --> " in srt
    stream = await asyncio.to_thread(
        openai_client.audio.transcriptions.create,
        model="gpt-4o-transcribe-diarize",
        file=SAMPLE_WAV.open("rb"),
        response_format="diarized_json",
        stream=True,
    )
    events = await asyncio.to_thread(list, stream)
    kinds = [e.type for e in events]
    assert kinds[-1] == "transcript.text.done" and "transcript.text.delta" in kinds
    deltas = [e for e in events if e.type == "transcript.text.delta"]
    segments = [e for e in events if e.type == "transcript.text.segment"]
    assert "".join(e.delta for e in deltas).split() == events[-1].text.split()
    # the segments with their speakers come once the whole recording is diarized
    assert kinds.index("transcript.text.segment") > max(
        i for i, k in enumerate(kinds) if k.endswith("delta")
    )
    assert {s.speaker for s in segments} == {"S1", "S2"}
    assert " ".join(s.text for s in segments).split() == events[-1].text.split()
    # diarized_json whole (not streamed): test_file_speakers' known speakers


async def test_each_sentence_of_a_recording_keeps_its_last_word(openai_client, tmp_path):
    """Five sentences between pauses of 0.6 to 2.2 s, packed in one window: each segment
    ends with its own sentence's last word. Packed end to end, the aligner put "today."
    in the next segment, and every segment after it began a word late."""
    audio, truth = monologue()
    path = write_wav(tmp_path / "monologue.wav", audio)
    verbose = await asyncio.to_thread(
        openai_client.audio.transcriptions.create,
        model="whisper-1",
        file=path.open("rb"),
        response_format="verbose_json",
        timestamp_granularities=["segment"],
    )
    said = [normalised(u.text).split() for u in truth]
    heard = [normalised(s.text).split() for s in verbose.segments]
    assert len(heard) == len(said)
    assert [h[-1] for h in heard] == [s[-1] for s in said]
    assert [h[0] for h in heard] == [s[0] for s in said]


def _wav_audio():
    from audio_fixtures import read_wav

    return read_wav(SAMPLE_WAV)


_TMP = {}


def sample_dir_tmp():
    if "dir" not in _TMP:
        _TMP["dir"] = Path(tempfile.mkdtemp(prefix="parley-files-test-"))
    return _TMP["dir"]


# ---------------------------------------------------------------- bad input, fake engine


@pytest.fixture(scope="module")
async def fake():
    server = await serve_fake(
        token=KEY, files={"max_upload_mb": 1, "max_duration_s": 20, "max_jobs": 1}
    )
    yield f"http://127.0.0.1:{server.port}", server
    await server.stop()


@pytest.fixture(scope="module")
def speech_wav():
    audio, _ = conversation([("en-us", "Hello there, this is a short recording.")])
    return write_wav(sample_dir_tmp() / "short.wav", audio).read_bytes()


async def _post(url: str, **kwargs) -> httpx.Response:
    headers = kwargs.pop("headers", {"Authorization": f"Bearer {KEY}"})
    async with httpx.AsyncClient(timeout=60) as client:
        return await client.post(url, headers=headers, **kwargs)


async def test_a_fake_engine_recording_goes_through_every_format(fake, speech_wav):
    url, _ = fake
    for fmt in ("json", "text", "srt", "vtt", "verbose_json"):
        response = await _post(
            f"{url}/v1/audio/transcriptions",
            files={"file": ("a.wav", speech_wav)},
            data={"response_format": fmt},
        )
        assert response.status_code == 200, response.text
        assert "w" in response.text


async def test_stream_is_taken_only_with_the_formats_openai_streams(fake, speech_wav):
    """stream=true with json streams events; with srt, vtt or verbose_json the document
    comes whole, as whisper-1 ignores stream."""
    url, _ = fake
    for fmt, streamed in (("json", True), ("srt", False), ("verbose_json", False)):
        response = await _post(
            f"{url}/v1/audio/transcriptions",
            files={"file": ("a.wav", speech_wav)},
            data={"response_format": fmt, "stream": "true"},
        )
        assert response.status_code == 200, response.text
        is_events = response.headers["content-type"].startswith("text/event-stream")
        assert is_events == streamed, fmt
        assert response.text.startswith("data: " if streamed else {"srt": "1\n"}.get(fmt, "{"))


async def test_logprobs_are_included_when_asked_as_openais_client_reads_them(fake, speech_wav):
    """include=["logprobs"] (json, and the streamed done event): an entry a word, whose
    tokens make the text, each a log probability with its UTF-8 bytes; none unasked."""
    from openai import AsyncOpenAI

    url, _ = fake
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)
    plain = await client.audio.transcriptions.create(model="whisper-1", file=speech_wav)
    assert plain.logprobs is None
    result = await client.audio.transcriptions.create(
        model="whisper-1", file=speech_wav, include=["logprobs"]
    )
    assert result.logprobs and "".join(p.token for p in result.logprobs) == result.text
    assert all(
        p.logprob <= 0 and bytes(map(int, p.bytes)).decode() == p.token for p in result.logprobs
    )
    stream = await client.audio.transcriptions.create(
        model="whisper-1", file=speech_wav, include=["logprobs"], stream=True
    )
    (done,) = [event async for event in stream if event.type == "transcript.text.done"]
    assert [p.token for p in done.logprobs] == [p.token for p in result.logprobs]


async def test_bad_uploads_get_their_documented_errors(fake, speech_wav, tmp_path, monkeypatch):
    url, _ = fake
    # The server runs in this process: its uploads go to a folder of this test's own, so
    # that another test process's uploads in the shared temporary folder are not counted.
    temporary = tmp_path / "uploads"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    openai = f"{url}/v1/audio/transcriptions"
    cases = [  # (response, status, code)
        (
            await _post(openai, files={"file": ("a.wav", speech_wav)}, headers={}),
            401,
            "unauthorized",
        ),
        (
            await _post(openai, data={"model": "whisper-1"}, files={"other": ("x", b"1")}),
            400,
            "bad_request",
        ),
        (
            await _post(
                openai, files={"file": ("a.wav", speech_wav)}, data={"response_format": "xml"}
            ),
            400,
            "bad_request",
        ),
        (await _post(openai, files={"file": ("a.wav", b"not audio at all")}), 400, "bad_audio"),
        (await _post(openai, files={"file": ("a.wav", b"")}), 400, "bad_audio"),
        (await _post(openai, files={"file": ("a.wav", b"\0" * (2 << 20))}), 413, "too_large"),
        (await _post(openai, files={"file": ("long.wav", _long_wav(tmp_path))}), 413, "too_long"),
        (
            await _post(openai, files={"file": ("a.wav", speech_wav)}, data={"language": "xx"}),
            400,
            "bad_request",
        ),
    ]
    for response, status, code in cases:
        assert response.status_code == status, response.text
        assert response.json()["error"]["code"] == code
    reason = cases[3][0].json()["error"]["message"]
    assert "Invalid data" in reason and "parley-upload" not in reason  # ffmpeg's, no path
    deepgram = await _post(
        f"{url}/v1/listen", content=b"junk", headers={"Authorization": f"Token {KEY}"}
    )
    assert deepgram.status_code == 400 and deepgram.json()["err_code"] == "BAD_AUDIO"
    predict = await _post(
        f"{url}/predict", files={"file": ("a.wav", speech_wav)}, data={"parameters": "{not json"}
    )
    assert predict.status_code == 400 and "parameters" in predict.json()["detail"]
    nested = await _post(  # nested past Python's stack: still the same answer, not a 500
        f"{url}/predict", files={"file": ("a.wav", speech_wav)}, data={"parameters": "[" * 200_000}
    )
    assert nested.status_code == 400 and nested.json()["error"] == "bad_request"
    for languages, status in ((["en-US"], 200), (["es"], 400), ("en", 400)):  # English-only
        among = await _post(
            f"{url}/predict",
            files={"file": ("a.wav", speech_wav)},
            data={"parameters": json.dumps({"languages": languages})},
        )
        assert among.status_code == status, (languages, among.text)
    async with httpx.AsyncClient(timeout=10) as client:  # a route's path, another method
        wrong = [await client.get(f"{url}/predict"), await client.put(f"{url}/v1/listen")]
        upgrade = await client.get(
            f"{url}/v1/listen?encoding=linear16&sample_rate=16000",
            headers={"Authorization": f"Token {KEY}"},
        )
    assert [(r.status_code, r.headers["Allow"]) for r in wrong] == [
        (405, "POST"),
        (405, "GET, POST"),
    ]
    assert wrong[0].json()["error"] == "method_not_allowed"
    assert upgrade.status_code == 426  # the live wire's path still answers as one
    assert not (temporary / "a.wav").exists()  # never written under the client's name
    assert list(temporary.glob("parley-upload-*")) == []  # and deleted after the answer


async def test_deepgram_multichannel_is_bounded_by_channels_and_their_audio(fake, tmp_path):
    """multichannel=true transcribes each channel: the duration limit (20 s here) counts
    every channel's audio, so 12 s of stereo is 413 too_long that mixed is not; a file of
    more than 8 channels is 400 bad_request; both in Deepgram's error shape."""
    url, _ = fake
    listen = f"{url}/v1/listen"
    headers = {"Authorization": f"Token {KEY}"}
    tone = np.sin(np.arange(12 * 16000) / 16000 * 2 * np.pi * 300).astype(np.float32) * 0.1
    stereo = write_wav(tmp_path / "stereo.wav", np.stack([tone, tone])).read_bytes()
    nine = write_wav(tmp_path / "nine.wav", np.stack([tone[:16000]] * 9)).read_bytes()
    mixed = await _post(listen, content=stereo, headers=headers)
    apart = await _post(f"{listen}?multichannel=true", content=stereo, headers=headers)
    many = await _post(f"{listen}?multichannel=true", content=nine, headers=headers)
    assert mixed.status_code == 200 and mixed.json()["metadata"]["channels"] == 1
    assert (apart.status_code, apart.json()["err_code"]) == (413, "TOO_LONG")
    assert (many.status_code, many.json()["err_code"]) == (400, "BAD_REQUEST")
    assert "9 channels" in many.json()["err_msg"]


async def test_deepgram_reads_a_headerless_body_by_its_encoding(fake, speech_wav, tmp_path):
    """Raw PCM16 or mu-law (no container) is read as encoding, sample_rate and channels
    say, as Deepgram reads it (each channel apart with multichannel); a WAV is read by its
    header whatever they say; a raw encoding without its rate is 400."""
    url, _ = fake
    listen = f"{url}/v1/listen"
    headers = {"Authorization": f"Token {KEY}"}
    wav = tmp_path / "speech.wav"
    wav.write_bytes(speech_wav)
    mulaw = subprocess.run(
        ["ffmpeg", "-loglevel", "error", "-i", str(wav), "-f", "mulaw", "-ar", "8000", "-"],
        check=True,
        capture_output=True,
    ).stdout
    pcm = speech_wav[44:]  # the WAV's samples alone: 16 kHz PCM16 mono
    stereo = np.repeat(np.frombuffer(pcm, dtype="<i2"), 2).tobytes()  # each sample twice
    seconds = len(pcm) / 32000
    cases = {
        "encoding=linear16&sample_rate=16000": pcm,
        "encoding=mulaw&sample_rate=8000": mulaw,
        "encoding=linear16&sample_rate=16000&channels=2&multichannel=true": stereo,
        "encoding=linear16&sample_rate=8000": speech_wav,  # the header wins
        "encoding=linear16": pcm,
    }
    answers = {
        q: await _post(f"{listen}?{q}", content=body, headers=headers) for q, body in cases.items()
    }
    for query, answer in list(answers.items())[:4]:
        assert answer.status_code == 200, (query, answer.text)
        metadata = answer.json()["metadata"]
        assert metadata["duration"] == pytest.approx(seconds, abs=0.01), query
        channels = answer.json()["results"]["channels"]
        assert metadata["channels"] == len(channels) == (2 if "multichannel" in query else 1)
        assert all(c["alternatives"][0]["transcript"] for c in channels), query
    refused = answers["encoding=linear16"]
    assert refused.status_code == 400 and "sample_rate" in refused.json()["err_msg"]
    plain = await _post(listen, content=pcm, headers=headers)  # no encoding: no container
    assert plain.status_code == 400 and plain.json()["err_code"] == "BAD_AUDIO"


async def test_a_full_server_answers_429_with_retry_after_and_a_drain_503(fake, speech_wav):
    url, server = fake
    jobs = server.service.file_jobs
    with jobs.slot():  # the one job slot, taken
        busy = await _post(f"{url}/v1/audio/transcriptions", files={"file": ("a.wav", speech_wav)})
    assert busy.status_code == 429 and busy.headers["Retry-After"] == "5"
    assert busy.json()["error"]["code"] == "server_busy"
    metrics = (await asyncio.to_thread(requests.get, f"{url}/metrics")).text
    assert 'parley_file_jobs_total{outcome="server_busy"}' in metrics
    assert "parley_file_audio_seconds_total" in metrics


async def test_a_form_holds_every_field_protocol_md_allows_and_no_more(speech_wav):
    """100 keyterms, sent as OpenAI's SDK sends a list (a field each), are taken; fields
    past 8 MiB together are refused with 400, each under its own 1 MiB bound."""
    from openai import AsyncOpenAI

    server = await serve_fake(token=KEY)
    try:
        base = f"http://127.0.0.1:{server.port}"
        client = AsyncOpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0)
        text = await client.audio.transcriptions.create(
            model="whisper-1",
            file=("a.wav", speech_wav),
            response_format="text",
            extra_body={"keyterms": [f"term{k}" for k in range(100)]},
        )
        assert "w" in text
        large = await _post(
            f"{base}/v1/audio/transcriptions",
            files={"file": ("a.wav", speech_wav)},
            data={f"field{k}": "a" * 1_000_000 for k in range(9)},
        )
        assert large.status_code == 400, large.text
        assert "8 MiB" in large.json()["error"]["message"]
    finally:
        await server.stop()


async def test_the_model_listing_answers_openais_client(fake):
    """`GET /v1/models` lists the one model that answers, as the openai package reads it;
    another model's id is a 404 `model_not_found`, and a wrong key a 401, in OpenAI's
    error shape."""
    from openai import AsyncOpenAI, AuthenticationError, NotFoundError

    from fake_engine import FakeEngine

    url, _ = fake
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)
    served = FakeEngine.label
    listed = await client.models.list()
    assert [model.id for model in listed.data] == [served]
    assert listed.data[0].object == "model" and listed.data[0].owned_by == "parley"
    assert (await client.models.retrieve(served)).id == served
    with pytest.raises(NotFoundError) as missing:
        await client.models.retrieve("whisper-1")
    assert missing.value.code == "model_not_found"
    with pytest.raises(AuthenticationError):
        await AsyncOpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0).models.list()
    # A path of the listing with another method: 405, with the methods it takes.
    other = await _post(f"{url}/v1/models")
    assert other.status_code == 405 and other.json()["error"] == "method_not_allowed"
    assert other.headers["Allow"] == "GET, HEAD"


def _long_wav(tmp_path) -> bytes:
    """25 s of 8 kHz mu-law (small, past the 20 s limit), made by ffmpeg."""
    path = tmp_path / "long.wav"
    subprocess.run(
        [
            "ffmpeg",
            "-loglevel",
            "error",
            "-f",
            "lavfi",
            "-i",
            "sine=frequency=300:duration=25",
            "-ar",
            "8000",
            "-acodec",
            "pcm_mulaw",
            str(path),
        ],
        check=True,
    )
    return path.read_bytes()


async def test_decode_file_reads_any_container(tmp_path):
    """ffmpeg's decoding: an Ogg/Opus file comes back as 16 kHz mono of its length."""
    path = tmp_path / "tone.ogg"
    subprocess.run(
        [
            "ffmpeg",
            "-loglevel",
            "error",
            "-f",
            "lavfi",
            "-i",
            "sine=frequency=440:duration=2",
            "-ac",
            "2",
            "-c:a",
            "libopus",
            str(path),
        ],
        check=True,
    )
    audio = await decode_file(path, 60)
    assert abs(len(audio) / 16000 - 2.0) < 0.05 and np.abs(audio).max() > 0.05


async def test_a_recording_is_decoded_and_segmented_with_one_copy_of_its_audio(tmp_path):
    """Ten minutes of speech and pauses (a WAV): decoding takes at most its float32
    audio and the 16-bit samples at once, and its segments keep no audio of their own
    (before: three times the audio to decode, and most of it again in the segments, for
    as long as a job ran). The samples read as the conversion always gave them."""
    import tracemalloc
    import wave

    from audio_fixtures import read_wav
    from parley.core.vad import VadConfig
    from parley.recordings.file_results import segment_recording

    sample = read_wav(SAMPLE_WAV)  # 30 s
    path = write_wav(tmp_path / "ten.wav", np.tile(sample, 20))
    tracemalloc.start()
    try:
        audio = await decode_file(path, 3600)
        decoding_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        pieces, reasons = segment_recording(audio, VadConfig(), 0.3)
        held, segmenting_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    with wave.open(str(path)) as wav:
        pcm16 = np.frombuffer(wav.readframes(wav.getnframes()), "<i2")
    assert np.array_equal(audio, pcm16.astype(np.float32) / 32768.0)
    assert decoding_peak <= 1.6 * audio.nbytes, decoding_peak / audio.nbytes
    assert len(pieces) == len(reasons) >= 20
    assert segmenting_peak - audio.nbytes <= 0.1 * audio.nbytes
    assert held - audio.nbytes <= 0.05 * audio.nbytes


async def test_parley_transcribe_in_process_and_against_a_server(
    fake, speech_wav, models_dir, tmp_path
):
    """`parley transcribe`: in-process with speakers (RTTM of sample.wav's two, one of them
    named from a clip of its voice by --speaker), and with --url against a server (its key
    from $PARLEY_TOKEN; --replace and --speaker sent along); a server's error is its
    message and exit status 1."""
    import os
    import sys

    from audio_fixtures import read_wav

    parley = [sys.executable, "-m", "parley"]
    host = write_wav(tmp_path / "host.wav", read_wav(SAMPLE_WAV)[22 * 16000 : 27 * 16000 + 12800])
    url, _ = fake
    path = tmp_path / "short.wav"
    path.write_bytes(speech_wav)
    env = {**os.environ, "PARLEY_TOKEN": KEY}
    short = write_wav(tmp_path / "short-clip.wav", read_wav(SAMPLE_WAV)[:16000])
    # the decoding options and the cue size travel as the endpoint's fields: every word
    # the fake hears (w0 … w9) replaced, on cues of one line of at most 12 characters
    replacing = [arg for k in range(10) for arg in ("--replace", f"w{k}:heard")]

    def run(args: list[str], **more) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*parley, "transcribe", *args], capture_output=True, text=True, timeout=300, **more
        )

    def against_the_server() -> list[subprocess.CompletedProcess]:
        # one after another: the server transcribes one recording at a time (429 past it)
        return [
            run(
                [str(path), "--url", url, "--format", "srt", *replacing]
                + ["--max-line-width", "12", "--max-line-count", "1"],
                env=env,
            ),
            run([str(path), "--url", url, "--speaker", f"host={short}"], env=env),
            run([str(path), "--url", url]),
        ]

    # the in-process run beside those three: each is a process, most of it starting up
    rttm, (remote, named, refused) = await asyncio.gather(
        asyncio.to_thread(
            run,
            [str(SAMPLE_WAV), "--diarization", "bundle", "--format", "rttm"]
            + ["--speaker", f"host={host}", "--models-dir", str(models_dir)],
        ),
        asyncio.to_thread(against_the_server),
    )
    assert rttm.returncode == 0, rttm.stderr
    turns = [line.split() for line in rttm.stdout.splitlines()]
    labels = {turn[7] for turn in turns}
    assert len(labels) == 2 and "host" in labels, labels
    # the named voice is the one the clip was cut from (sample.wav's 21.8 to 28.5 s)
    at_24 = [t for t in turns if float(t[3]) <= 24.0 <= float(t[3]) + float(t[4])]
    assert at_24 and {t[7] for t in at_24} == {"host"}, turns
    assert remote.returncode == 0 and remote.stdout.startswith("1\n"), remote.stderr
    cues = [cue.splitlines() for cue in remote.stdout.strip().split("\n\n")]
    assert len(cues) > 1 and all(len(cue) == 3 and len(cue[2]) <= 12 for cue in cues), cues
    assert {word for cue in cues for word in cue[2].split()} == {"heard"}
    assert named.returncode == 1 and "must be 2 to 10 s" in named.stderr, named.stderr
    assert refused.returncode == 1 and "401" in refused.stderr


async def test_a_deepgram_callback_gets_the_result_signed_and_only_where_allowed(speech_wav):
    """?callback=URL: {"request_id"} at once, then the result POSTed, signed as Parley's
    webhooks, to an allowed target; any other URL is refused with 400."""
    from test_webhooks import SECRET, Receiver

    receiver = Receiver()
    async with receiver as hooks:
        server = await serve_fake(webhooks={"allowed_targets": [hooks], "secret": SECRET})
        try:
            base = f"http://127.0.0.1:{server.port}/v1/listen?punctuate=true"
            refused = await _post(
                f"{base}&callback=http://127.0.0.1:9/elsewhere", content=speech_wav, headers={}
            )
            assert refused.status_code == 400 and refused.json()["err_code"] == "BAD_REQUEST"
            answer = await _post(f"{base}&callback={hooks}", content=speech_wav, headers={})
            assert answer.status_code == 200
            request_id = answer.json()["request_id"]
            (event,) = await receiver.delivered()
        finally:
            await server.stop()
    assert event["metadata"]["request_id"] == request_id
    assert event["results"]["channels"][0]["alternatives"][0]["words"]


async def test_origins_per_key_limits_and_a_drain_over_http(speech_wav):
    """A page from another origin gets 403; a key over its limit of running recordings
    429 too_many_jobs; a recording still running when a drain's deadline passes ends
    with 503 shutting_down, and a new one is refused with 503."""
    from fake_engine import FakeEngine

    server = await serve_fake(
        FakeEngine(step_s=0.05), token=KEY, server={"max_sessions_per_key": 1}
    )
    url = f"http://127.0.0.1:{server.port}/v1/audio/transcriptions"
    try:
        foreign = await _post(
            url,
            files={"file": ("a.wav", speech_wav)},
            headers={"Authorization": f"Bearer {KEY}", "Origin": "http://elsewhere.example"},
        )
        assert foreign.status_code == 403
        assert foreign.json()["error"]["code"] == "forbidden_origin"
        first = asyncio.ensure_future(_post(url, files={"file": ("a.wav", speech_wav)}))
        while not server.service.file_jobs.running:
            await asyncio.sleep(0.01)
        second = await _post(url, files={"file": ("a.wav", speech_wav)})
        assert second.status_code == 429 and second.json()["error"]["code"] == "too_many_jobs"
        await server.service.drain(0.05)
        drained = await first
        assert drained.status_code == 503, drained.text
        assert drained.json()["error"]["code"] == "shutting_down"
        late = await _post(url, files={"file": ("a.wav", speech_wav)})
        assert late.status_code == 503
    finally:
        await server.stop()
