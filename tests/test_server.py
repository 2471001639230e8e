"""The real server on loopback, with the real tiny.en weights, and real WebSocket clients."""

import asyncio
import json
import urllib.request

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from audio_fixtures import (SAMPLE_WAV, conversation, read_wav, sample_reference_text, wer,
                            words_of)
from conftest import serve_real
from parley.client.stream import run_stream, stream_url
from parley.protocol.messages import StreamConfig


@pytest.fixture
async def start(models_dir):
    """Start real servers on port 0 with the given setting overrides; stop them after."""
    running = []

    async def _start(token: str | None = None, **sections):
        server = await serve_real(models_dir, token, **sections)
        running.append(server)
        return f"ws://127.0.0.1:{server.port}/v1/stream", server

    yield _start
    for server in running:
        await server.stop()


def pcm16(audio: np.ndarray) -> bytes:
    return (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()


async def chunks_of(audio: np.ndarray, seconds: float = 0.1):
    data, step = pcm16(audio), int(16000 * seconds) * 2
    for i in range(0, len(data), step):
        yield data[i:i + step]


async def refused(url: str, **connect_args) -> tuple[dict, int]:
    """Connect, expect an error message then a close; return both."""
    async with connect(url, **connect_args) as ws:
        message = json.loads(await ws.recv())
        with pytest.raises(ConnectionClosed):
            await ws.recv()
        return message, ws.close_code


async def test_sample_in_real_time_is_transcribed_with_partials(start):
    """sample.wav streamed in real time: WER ≤ 0.25, partials before finals, sane times."""
    url, _ = await start()
    audio = read_wav(SAMPLE_WAV)
    result = await run_stream(stream_url(url, StreamConfig(), None), chunks_of(audio), 32000)
    assert result.errors == [] and result.close_code == 1000
    assert result.started["config"]["encoding"] == "pcm_s16le"
    hypothesis = " ".join(f["text"] for f in result.finals)
    assert wer(sample_reference_text(), hypothesis) <= 0.25
    assert result.ended["audio_duration"] == pytest.approx(30.0, abs=0.01)
    spoken = [f for f in result.finals if f["end"] - f["start"] > 2.0]
    partial_ids = {p["segment_id"] for p in result.partials}
    assert spoken and all(f["segment_id"] in partial_ids for f in spoken)
    times = [t for f in result.finals for t in (f["start"], f["end"])]
    assert times == sorted(times) and times[-1] <= 30.0
    for final in result.finals:
        assert final["speaker"] is None
        assert all(final["start"] <= w["start"] <= w["end"] <= final["end"]
                   for w in final["words"])


async def test_fast_streaming_applies_back_pressure_and_loses_nothing(start):
    """--fast sends as fast as the server reads; every turn still ends in a final."""
    url, _ = await start(asr={"queue_size": 2})
    audio, truth = conversation([("en-us", "The cat sat on the mat."),
                                 ("en-us", "The train leaves from platform number nine."),
                                 ("en-us", "Good morning, everyone.")], gap_s=0.8)
    result = await run_stream(stream_url(url, StreamConfig(), None), chunks_of(audio), 32000,
                              fast=True)
    assert result.errors == [] and result.ended["segments"] == 3
    heard = words_of(" ".join(f["text"] for f in result.finals))
    assert {"mat", "train", "platform", "morning"} <= set(heard)


async def test_bad_messages_get_errors_and_the_session_goes_on(start):
    """Bad JSON, an unknown type and a torn audio frame are reported; the stream continues."""
    url, _ = await start()
    audio, _ = conversation([("en-us", "The cat sat on the mat.")])
    async with connect(url) as ws:
        assert json.loads(await ws.recv())["type"] == "session_started"
        await ws.send("{not json")
        await ws.send(json.dumps({"type": "configure"}))
        await ws.send(b"\x00\x01\x02")  # 3 bytes: not whole PCM16 samples
        await ws.send(pcm16(audio))
        await ws.send(json.dumps({"type": "end_of_stream"}))
        messages = [json.loads(m) async for m in ws]
        assert ws.close_code == 1000
    errors = [m for m in messages if m["type"] == "error"]
    assert [e["code"] for e in errors] == ["bad_message", "bad_message", "bad_audio"]
    assert not any(e["fatal"] for e in errors)
    assert "unknown message type 'configure'" in errors[1]["message"]
    finals = [m for m in messages if m["type"] == "final"]
    assert "mat" in words_of(finals[0]["text"]) and messages[-1]["type"] == "session_ended"


@pytest.mark.parametrize("query, fragment", [("encoding=opus", "encoding must be one of"),
                                             ("sample_rate=0", "sample_rate"),
                                             ("language=de", "English-only"),
                                             ("diarization=true", "diarization")])
async def test_bad_session_config_is_refused_with_4400(start, query, fragment):
    """A bad query parameter gets bad_config and close code 4400."""
    url, _ = await start()
    message, code = await refused(f"{url}?{query}")
    assert (message["code"], message["fatal"], code) == ("bad_config", True, 4400)
    assert fragment in message["message"]


async def test_token_is_required_when_configured(start):
    """Without the right token: 4401; with it, in the query or a Bearer header: admitted."""
    url, _ = await start(token="s3cret")
    for bad in (url, f"{url}?token=wrong"):
        message, code = await refused(bad)
        assert (message["code"], code) == ("unauthorized", 4401)
    for args in ({"uri": f"{url}?token=s3cret"},
                 {"uri": url, "additional_headers": {"Authorization": "Bearer s3cret"}}):
        async with connect(**args) as ws:
            assert json.loads(await ws.recv())["type"] == "session_started"


async def test_oversize_frame_closes_with_1009(start):
    """An audio message over max_frame_bytes gets frame_too_large and close code 1009."""
    url, _ = await start(server={"max_frame_bytes": 4096})
    async with connect(url) as ws:
        await ws.recv()
        await ws.send(bytes(8192))
        message = json.loads(await ws.recv())
        with pytest.raises(ConnectionClosed):
            await ws.recv()
    assert (message["code"], ws.close_code) == ("frame_too_large", 1009)


async def test_idle_client_is_closed_with_4408(start):
    """A client that sends nothing for idle_timeout_s gets idle_timeout and 4408."""
    url, _ = await start(server={"idle_timeout_s": 0.5})
    async with connect(url) as ws:
        await ws.recv()
        await ws.send(json.dumps({"type": "keep_alive"}))
        await asyncio.sleep(0.3)
        await ws.send(json.dumps({"type": "keep_alive"}))  # keeps it open past 0.5 s
        await asyncio.sleep(0.3)
        await ws.send(bytes(320))
        message = json.loads(await ws.recv())
    assert (message["code"], ws.close_code) == ("idle_timeout", 4408)


async def test_full_server_refuses_with_1013_and_keeps_serving(start):
    """Past max_sessions a client gets server_busy (1013); the admitted one carries on."""
    url, _ = await start(server={"max_sessions": 1})
    audio, _ = conversation([("en-us", "Good morning, everyone.")])
    async with connect(url) as first:
        await first.recv()
        message, code = await refused(url)
        assert (message["code"], code) == ("server_busy", 1013)
        await first.send(pcm16(audio))
        await first.send(json.dumps({"type": "end_of_stream"}))
        finals = [json.loads(m) for m in [m async for m in first]]
    assert "morning" in words_of(" ".join(f.get("text", "") for f in finals))


async def test_a_client_that_vanishes_does_not_disturb_another(start):
    """One client sends garbage and drops its connection mid-speech; the other is unharmed."""
    url, server = await start()
    audio, _ = conversation([("en-us", "The train leaves from platform number nine.")])

    async def rude():
        ws = await connect(url)
        await ws.recv()
        await ws.send(pcm16(audio[: len(audio) // 2]))
        await ws.send("garbage")
        ws.transport.abort()  # no close handshake at all

    good = run_stream(stream_url(url, StreamConfig(), None), chunks_of(audio), 32000, fast=True)
    result, _ = await asyncio.gather(good, rude())
    assert result.errors == [] and result.close_code == 1000
    assert "platform" in words_of(" ".join(f["text"] for f in result.finals))
    await asyncio.sleep(0.2)
    assert server.endpoint.live_sessions == 0


async def test_shutdown_tells_clients_with_1001(start):
    """Stopping the server sends shutting_down and closes live sessions with 1001."""
    url, server = await start()
    async with connect(url) as ws:
        await ws.recv()
        await server.stop()
        message = json.loads(await ws.recv())
        with pytest.raises(ConnectionClosed):
            await ws.recv()
    assert (message["code"], ws.close_code) == ("shutting_down", 1001)


async def test_health_and_unknown_paths(start):
    """GET /health answers JSON; an unknown path is a 404 with a JSON reason."""
    url, _ = await start()
    base = url.replace("ws://", "http://").removesuffix("/v1/stream")
    health = await asyncio.to_thread(lambda: json.load(urllib.request.urlopen(base + "/health")))
    assert health["status"] == "ok" and health["model"] == "tiny.en"
    with pytest.raises(urllib.error.HTTPError) as caught:
        await asyncio.to_thread(urllib.request.urlopen, base + "/nope")
    assert caught.value.code == 404
