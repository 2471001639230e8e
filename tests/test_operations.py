"""Running Parley in production, on loopback with real clients: probes and metrics,
draining that keeps the audio, API keys, origins, TLS, limits, and faults.

The server decodes with the fake engine (the behaviour here does not depend on the
model); the SIGTERM and secrets tests run the real `parley serve` in a process of
its own with the real tiny.en model.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from conftest import (
    SHARED_SERVER_ENV,
    assert_finals_are_their_audio,
    chunks_of,
    pcm16,
    refused,
    wire_finals,
)
from fake_engine import FakeEngine
from parley.app import start_server
from parley.client.stream import run_stream, stream_url
from parley.config import Settings
from parley.core.speaker_masks import FrameGrid
from parley.core.stream_diarizer import DiarizationConfig
from parley.protocol.messages import StreamConfig
from parley.sessions.streams import AsrService
from parley.workers.diarization import DiarizationWorker
from parley.workers.scheduler import AsrScheduler


def http_base(url: str) -> str:
    return url.replace("ws://", "http://").removesuffix("/v1/stream")


async def get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    def fetch() -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(url, timeout=10, context=context) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, error.read()

    return await asyncio.to_thread(fetch)


def samples(metrics_text: str) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) → value, from the Prometheus text format."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics_text)
        for s in family.samples
    }


async def collect(ws) -> list[dict]:
    """Every message until the server closes (with any close code)."""
    messages = []
    try:
        while True:
            messages.append(json.loads(await ws.recv()))
    except ConnectionClosed:
        return messages


# ---------------------------------------------------------------- probes and metrics


async def test_probes_and_metrics_answer_on_a_running_server(start, talk):
    """/healthz and /readyz answer 200; /metrics counts a stream's audio, finals and outcome."""
    url, _ = await start()
    audio, truth = talk
    result = await run_stream(
        stream_url(url, StreamConfig(), None), chunks_of(audio), 32000, fast=True
    )
    assert result.close_code == 1000 and len(result.finals) == len(truth)
    base = http_base(url)
    assert await get(base + "/healthz") == (200, b'{"status": "ok"}')
    status, body = await get(base + "/readyz")
    assert status == 200 and json.loads(body)["status"] == "ready"
    status, body = await get(base + "/metrics")
    text = body.decode()
    assert status == 200 and "# TYPE parley_sessions_live gauge" in text
    for name in (
        "parley_final_latency_seconds histogram",
        "parley_decode_queue_wait_seconds histogram",
        "parley_asr_busy_fraction gauge",
        "parley_draft_tokens_total counter",
        "parley_errors_total counter",
        "parley_diarization_step_seconds histogram",
    ):
        assert f"# TYPE {name}" in text
    got = samples(text)
    assert got[("parley_finals_total", ())] == len(result.finals)
    assert got[("parley_audio_seconds_total", ())] == pytest.approx(len(audio) / 16000, abs=0.01)
    assert got[("parley_sessions_total", (("outcome", "ended"),))] == 1
    assert got[("parley_sessions_live", ())] == 0
    assert got[("parley_final_latency_seconds_count", ())] == len(result.finals)
    assert got[("parley_decode_compute_seconds_count", (("kind", "final"),))] == len(truth)
    assert got[("parley_asr_step_rows_count", ())] > 0 and got[("parley_ready", ())] == 1


async def test_errors_are_counted_by_code(start):
    """A refused session and a bad message show up under their codes in /metrics."""
    url, _ = await start()
    await refused(f"{url}?volume=11")
    async with connect(url) as ws:
        await ws.recv()
        await ws.send("{not json")
        assert json.loads(await ws.recv())["code"] == "bad_message"
    await asyncio.sleep(0.1)
    got = samples((await get(http_base(url) + "/metrics"))[1].decode())
    assert got[("parley_errors_total", (("code", "bad_config"),))] == 1
    assert got[("parley_errors_total", (("code", "bad_message"),))] == 1
    assert got[("parley_errors_total", (("code", "unauthorized"),))] == 0  # every code shows


# ---------------------------------------------------------------- draining


async def test_drain_finishes_live_sessions_and_refuses_new_ones(start, talk):
    """Mid-turn, a drain gives the client finals of all the audio it sent, session_ended
    (reason shutting_down) and close 1001; meanwhile /readyz is 503 and newcomers are refused."""
    url, server = await start(FakeEngine(encode_s=0.4))
    audio, truth = talk
    cut = int((truth[1].start + truth[1].end) / 2 * 16000)  # in the middle of the second turn
    sent = audio[:cut]
    messages = []
    async with connect(url) as ws:
        await ws.recv()
        await ws.send(pcm16(sent))
        while (
            messages[-1:] == []
            or messages[-1].get("segment_id") != 1
            or messages[-1]["type"] != "speech_started"
        ):
            messages.append(json.loads(await ws.recv()))  # the server has read up to there
        draining = asyncio.create_task(server.endpoint.drain(30))
        await asyncio.sleep(0.05)
        status, body = await get(http_base(url) + "/readyz")
        assert status == 503 and json.loads(body)["checks"]["draining"] is True
        message, code = await refused(url)
        assert (message["code"], code) == ("shutting_down", 1001)
        messages += await collect(ws)
        await draining
    assert ws.close_code == 1001
    finals = [m for m in messages if m["type"] == "final"]
    assert [f["segment_id"] for f in finals] == [0, 1]
    ended = messages[-1]
    assert ended["type"] == "session_ended" and ended["reason"] == "shutting_down"
    assert ended["audio_duration"] == pytest.approx(len(sent) / 16000, abs=0.001)
    assert ended["segments"] == 2
    last = finals[-1]
    assert last["reason"] == "end_of_stream" and last["end"] == pytest.approx(
        len(sent) / 16000, abs=0.05
    )
    assert_finals_are_their_audio(wire_finals(messages), sent)


async def test_drain_deadline_ends_the_rest_with_shutting_down(start, talk):
    """A session that cannot finish within the drain timeout gets shutting_down and 1001."""
    url, server = await start(FakeEngine(encode_s=3.0))
    audio, _ = talk
    async with connect(url) as ws:
        await ws.recv()
        async for chunk in chunks_of(audio):
            await ws.send(chunk)
        await asyncio.sleep(0.3)
        began = time.monotonic()
        await server.endpoint.drain(0.3)
        messages = await collect(ws)
    assert time.monotonic() - began < 2.5
    assert messages[-1]["code"] == "shutting_down" and ws.close_code == 1001


# ---------------------------------------------------------------- limits


async def test_a_long_non_ascii_parameter_name_gets_4400(start):
    """An unknown parameter of 200 non-ASCII characters: bad_config, 4400, a reason that fits."""
    url, _ = await start()
    async with connect(f"{url}?{'é' * 200}=1") as ws:
        message = json.loads(await ws.recv())
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
    assert (message["code"], ws.close_code) == ("bad_config", 4400)
    assert "unknown parameter" in message["message"]
    assert 0 < len(closed.value.rcvd.reason.encode()) <= 123


async def test_the_maximum_duration_ends_a_session_with_its_finals(start, talk):
    """At max_session_s the server stops reading, sends the finals of what it read,
    session_ended (reason max_duration) and closes with 4410."""
    url, _ = await start(server={"max_session_s": 1.5})
    audio, _ = talk
    async with connect(url) as ws:
        await ws.recv()
        with pytest.raises(ConnectionClosed):
            async for chunk in chunks_of(audio):
                await ws.send(chunk)
                await asyncio.sleep(0.1)
        messages = await collect(ws)
    assert ws.close_code == 4410
    ended = messages[-1]
    assert ended["type"] == "session_ended" and ended["reason"] == "max_duration"
    assert 1.3 <= ended["audio_duration"] <= 1.8
    heard = audio[: round(ended["audio_duration"] * 16000)]
    assert_finals_are_their_audio(wire_finals(messages), heard)


# ---------------------------------------------------------------- keys, origins, TLS


async def test_named_keys_and_the_per_key_session_limit(start):
    """Each named key is admitted (query, Bearer or Token header); a wrong one gets 4401;
    a key past its session limit gets too_many_sessions (4429) while another key gets in."""
    url, _ = await start(
        api_keys={"alice": "alice-key-0123", "bob": "bob-key-4567"},
        server={"max_sessions_per_key": 1},
    )
    message, code = await refused(f"{url}?token=alice-key-0124")
    assert (message["code"], code) == ("unauthorized", 4401)
    async with connect(f"{url}?token=alice-key-0123") as alice:
        assert json.loads(await alice.recv())["type"] == "session_started"
        message, code = await refused(
            url, additional_headers={"Authorization": "Bearer alice-key-0123"}
        )
        assert (message["code"], code) == ("too_many_sessions", 4429)
        async with connect(url, additional_headers={"Authorization": "Token bob-key-4567"}) as bob:
            assert json.loads(await bob.recv())["type"] == "session_started"


async def test_browser_origins_are_checked_on_the_handshake(start):
    """By default only pages of the server's own origin (and non-browser clients) get in;
    a configured list replaces that."""
    url, server = await start()
    own = f"http://127.0.0.1:{server.port}"
    message, code = await refused(url, origin="https://evil.example")
    assert (message["code"], code) == ("forbidden_origin", 4403)
    for origin in (own, None):
        async with connect(url, origin=origin) as ws:
            assert json.loads(await ws.recv())["type"] == "session_started"
    url, _ = await start(server={"allowed_origins": ["https://app.example"]})
    async with connect(url, origin="https://app.example") as ws:
        assert json.loads(await ws.recv())["type"] == "session_started"
    message, code = await refused(url, origin=own)
    assert code == 4403


def test_a_public_address_needs_keys_or_allow_anonymous():
    """Settings refuse a non-loopback host without keys, unless anonymous use is allowed."""
    with pytest.raises(ValueError, match="without API keys"):
        Settings(server={"host": "0.0.0.0"})
    assert Settings(server={"host": "0.0.0.0"}, allow_anonymous=True).allow_anonymous
    assert Settings(server={"host": "0.0.0.0"}, api_keys={"ops": "k-123456"}).has_keys


def test_a_public_address_with_a_key_file_of_no_keys_is_refused(tmp_path):
    """A key file of comments gives no key: served on a public address it would let
    anyone in, so the keys are refused; on loopback it means what no key file means."""
    from parley.loading import access_of

    key_file = tmp_path / "keys"
    key_file.write_text("# alice:to come\n\n")
    public = Settings(server={"host": "0.0.0.0"}, api_keys_file=key_file)
    with pytest.raises(ValueError, match="holds none"):
        access_of(public)
    assert not access_of(Settings(api_keys_file=key_file)).keys.required
    open_to_all = Settings(server={"host": "0.0.0.0"}, api_keys_file=key_file, allow_anonymous=True)
    assert not access_of(open_to_all).keys.required


async def test_tls_serves_wss_and_https(start, tmp_path):
    """With a certificate and key, streams are wss:// and probes https://."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )
    url, _ = await start(server={"ssl_certfile": cert, "ssl_keyfile": key})
    trust = ssl.create_default_context(cafile=str(cert))
    secure = url.replace("ws://", "wss://")
    async with connect(secure, ssl=trust) as ws:
        assert json.loads(await ws.recv())["type"] == "session_started"
    status, _ = await get(http_base(secure).replace("wss://", "https://") + "/healthz", trust)
    assert status == 200


# ---------------------------------------------------------------- faults


async def test_an_engine_fault_on_one_session_leaves_the_others_alone(start, talk):
    """Two streams at once; the engine fails one job of one of them: that session gets
    transcription_failed for that segment, and both get every other final."""
    audio, truth = talk
    quiet = (audio * 0.5).astype(np.float32)
    peak = float(np.max(np.abs(audio)))
    longest = max(range(len(truth)), key=lambda i: truth[i].end - truth[i].start)
    others = max(u.end - u.start for i, u in enumerate(truth) if i != longest) + 0.8

    def fails(request) -> bool:
        return float(np.max(np.abs(request.audio))) < 0.7 * peak and request.seconds > others

    url, _ = await start(FakeEngine(encode_s=0.02, fail=fails))
    config = StreamConfig(partials=False)
    loud, soft = await asyncio.gather(
        *(
            run_stream(stream_url(url, config, None), chunks_of(clip), 32000, fast=True)
            for clip in (audio, quiet)
        )
    )
    assert loud.errors == [] and len(loud.finals) == len(truth)
    assert_finals_are_their_audio(loud.finals, audio)
    assert [(e.code, e.segment_id) for e in soft.errors] == [("transcription_failed", longest)]
    assert [f.segment_id for f in soft.finals] == [i for i in range(len(truth)) if i != longest]
    assert soft.close_code == loud.close_code == 1000


class BrokenSpeakerModels:
    """Speaker models whose segmentation fails: a fault in the diarization thread."""

    grid = FrameGrid(step=0.016875, start=0.0)

    def segment(self, windows):
        raise RuntimeError("segmentation model fault")

    def embed(self, window, masks):
        raise RuntimeError("embedding model fault")


async def test_a_diarization_fault_is_reported_once_and_transcription_goes_on(servers, talk):
    """Every diarization step fails: the client gets one non-fatal diarization_failed
    error, and every final all the same."""
    settings = Settings(server={"port": 0}, diarization={"source": "bundle"})
    engine = FakeEngine()
    scheduler = AsrScheduler(engine, settings.asr.queue_size)
    diarization = DiarizationWorker(BrokenSpeakerModels(), DiarizationConfig())
    url, _ = await servers(
        await start_server(
            settings, scheduler, AsrService(scheduler, engine.label), diarization, warm_up=False
        )
    )
    audio, truth = talk
    result = await run_stream(
        stream_url(url, StreamConfig(diarization=True), None), chunks_of(audio), 32000, fast=True
    )
    assert [(e.code, e.fatal) for e in result.errors] == [("diarization_failed", False)]
    assert len(result.finals) == len(truth) and result.close_code == 1000
    assert_finals_are_their_audio(result.finals, audio)


# ---------------------------------------------------------------- the real process


SECRETS = {"alice": "alice-planted-key-7f3a9c", "HF_TOKEN": "hf_plantedTokenQ8m2Zx"}


@pytest.fixture(scope="module")
def sigterm_run(models_dir, talk, tmp_path_factory):
    """`parley serve` with planted secrets and JSON debug logs; one client streams two
    turns and a half, and the server gets SIGTERM while the third segment is open."""
    audio, truth = talk
    sent = audio[: int((truth[1].start + truth[1].end) / 2 * 16000)]
    key_file = tmp_path_factory.mktemp("keys") / "keys"
    key_file.write_text(f"# operators\nalice:{SECRETS['alice']}\n")
    env = {
        **os.environ,
        **SHARED_SERVER_ENV,
        "HF_TOKEN": SECRETS["HF_TOKEN"],
        "PYANNOTE_METRICS_ENABLED": "false",
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "parley",
            "serve",
            "--port",
            "0",
            "--models-dir",
            str(models_dir),
            "--api-keys-file",
            str(key_file),
            "--log-level",
            "debug",
            "--log-format",
            "json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        line = process.stdout.readline()
        port = int(line.split("/v1/stream")[0].rsplit(":", 1)[1])
        messages, close_code = asyncio.run(_stream_until_sigterm(port, sent, process))
        process.wait(timeout=60)
    finally:
        process.kill()
    return {
        "messages": messages,
        "close_code": close_code,
        "sent": sent,
        "truth": truth,
        "returncode": process.returncode,
        "stdout": line + process.stdout.read(),
        "stderr": process.stderr.read(),
    }


async def _stream_until_sigterm(port: int, sent, process) -> tuple[list[str], int]:
    url = f"ws://127.0.0.1:{port}/v1/stream?token={SECRETS['alice']}"
    received = []
    with pytest.raises(ConnectionClosed):
        async with connect(f"ws://127.0.0.1:{port}/v1/stream?token=not-the-key") as wrong:
            received.append(await wrong.recv())
            await wrong.recv()
    async with connect(url) as ws:
        received.append(await ws.recv())
        async for chunk in chunks_of(sent):
            await ws.send(chunk)
        while True:  # until the open segment's speech_started: the audio has been read
            received.append(await ws.recv())
            if json.loads(received[-1]) == {
                **json.loads(received[-1]),
                "type": "speech_started",
                "segment_id": 1,
            }:
                break
        process.send_signal(signal.SIGTERM)
        received.extend([m async for m in ws])
    return received, ws.close_code


@pytest.mark.slow
def test_sigterm_mid_stream_loses_no_accepted_speech(sigterm_run):
    """After SIGTERM the open turn still gets its final: every word sent is transcribed,
    then session_ended (reason shutting_down), close 1001, and the process exits 0."""
    messages = [json.loads(m) for m in sigterm_run["messages"]]
    finals = [m for m in messages if m["type"] == "final"]
    sent_s = len(sigterm_run["sent"]) / 16000
    assert [f["segment_id"] for f in finals] == [0, 1]
    assert "on the mat" in finals[0]["text"].lower()
    assert "train leaves" in finals[1]["text"].lower()
    assert finals[1]["reason"] == "end_of_stream" and finals[1]["end"] == pytest.approx(
        sent_s, abs=0.05
    )
    ended = messages[-1]
    assert ended["type"] == "session_ended" and ended["reason"] == "shutting_down"
    assert ended["audio_duration"] == pytest.approx(sent_s, abs=0.001)
    assert sigterm_run["close_code"] == 1001 and sigterm_run["returncode"] == 0


@pytest.mark.slow
def test_no_log_line_or_message_holds_a_secret(sigterm_run):
    """With debug logging (which logs request lines with their query), neither the key nor
    HF_TOKEN appears in the logs or any message; the JSON lines name the key instead."""
    everything = sigterm_run["stdout"] + sigterm_run["stderr"] + "".join(sigterm_run["messages"])
    leaked = [name for name, secret in SECRETS.items() if secret in everything]
    assert leaked == []
    redacted = "[redacted]" in sigterm_run["stderr"]
    assert redacted  # websockets' request line, with the key in its query, was logged
    lines = [
        json.loads(line) for line in sigterm_run["stderr"].splitlines() if line.startswith("{")
    ]
    ended = [r for r in lines if r.get("outcome") == "ended"]
    assert len(ended) == 1 and ended[0]["key"] == "alice" and ended[0]["session_id"]
    assert ended[0]["audio_s"] == pytest.approx(len(sigterm_run["sent"]) / 16000, abs=0.001)
    assert [r["outcome"] for r in lines if r.get("key") == "anonymous"] == ["unauthorized"]
