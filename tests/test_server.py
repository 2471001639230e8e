"""The server on loopback with real WebSocket clients, decoding with the fake engine.

Transport and protocol behaviour does not depend on the model, so these tests run on
``fake_engine.FakeEngine``: every final must be exactly the fake's transcription of
the audio between its ``start`` and ``end``, which no mixing of streams or segments
could produce by accident.
"""

import asyncio
import json
import logging
import urllib.request

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from conftest import (
    assert_finals_are_their_audio,
    chunks_of,
    heard_between,
    pcm16,
    refused,
    wire_finals,
)
from fake_engine import FakeEngine
from parley.client.stream import run_stream, stream_url
from parley.protocol.messages import StreamConfig


async def test_each_turn_ends_in_a_final_of_exactly_its_audio(start, talk):
    """Three spoken turns: three finals in order, each the transcription of its own span."""
    url, _ = await start()
    audio, truth = talk
    result = await run_stream(
        stream_url(url, StreamConfig(), None), chunks_of(audio), 32000, fast=True
    )
    assert result.errors == [] and result.close_code == 1000
    assert result.ended.segments == len(truth) == len(result.finals)
    assert_finals_are_their_audio(result.finals, audio)
    for final, said in zip(result.finals, truth):
        overlap = min(final.end, said.end) - max(final.start, said.start)
        assert overlap > 0.8 * (final.end - final.start - 0.6)  # all but the pads
        assert final.words and all(
            final.start <= w.start <= w.end <= final.end for w in final.words
        )


async def test_fast_streaming_applies_back_pressure_and_loses_nothing(start, talk):
    """With a queue of two and a slow engine, --fast is paced by the server; no turn is lost."""
    url, _ = await start(FakeEngine(encode_s=0.05, step_s=0.01), asr={"queue_size": 2})
    audio, truth = talk
    result = await run_stream(
        stream_url(url, StreamConfig(), None), chunks_of(audio), 32000, fast=True
    )
    assert result.errors == [] and result.ended.segments == len(truth)
    assert_finals_are_their_audio(result.finals, audio)


async def test_partials_come_before_their_final_in_real_time(start, talk):
    """Streamed in real time, a turn gets partials of its audio so far before its final."""
    url, _ = await start(asr={"partial_interval_s": 0.5})
    audio, _ = talk
    seen = []
    result = await run_stream(
        stream_url(url, StreamConfig(), None),
        chunks_of(audio[: 16000 * 5]),
        32000,
        on_message=seen.append,
    )
    assert result.errors == [] and result.partials
    kinds = [m.type for m in seen if m.type in ("partial", "final")]
    for partial in result.partials:
        final = next(f for f in result.finals if f.segment_id == partial.segment_id)
        assert kinds.index("partial") < kinds.index("final")
        assert partial.start == final.start and partial.end <= final.end
        assert partial.text == heard_between(audio, partial.start, partial.end)


async def test_concurrent_streams_each_get_only_their_own_audio(start, talk):
    """Four clients at once, each sending different audio: nobody's words leak."""
    url, _ = await start(FakeEngine(encode_s=0.01))
    audio, _ = talk
    clips = [audio[i * 8000 :] for i in range(4)]  # four different offsets
    results = await asyncio.gather(
        *(
            run_stream(stream_url(url, StreamConfig(), None), chunks_of(clip), 32000, fast=True)
            for clip in clips
        )
    )
    for clip, result in zip(clips, results):
        assert result.errors == [] and result.close_code == 1000
        assert_finals_are_their_audio(result.finals, clip)


async def test_a_failed_decode_is_reported_and_the_session_goes_on(start, talk):
    """The engine fails one segment: transcription_failed names it; the others are finals."""
    audio, truth = talk
    lengths = [u.end - u.start for u in truth]
    assert lengths[1] > max(lengths[0], lengths[2]) + 0.4  # the train turn is the longest
    longest_other = max(lengths[0], lengths[2]) + 0.6 + 0.2  # with its pads, and a margin
    url, _ = await start(FakeEngine(fail=lambda request: request.seconds > longest_other))
    result = await run_stream(
        stream_url(url, StreamConfig(partials=False), None), chunks_of(audio), 32000, fast=True
    )
    assert [e.code for e in result.errors] == ["transcription_failed"]
    assert result.errors[0].segment_id == 1 and not result.errors[0].fatal
    assert [f.segment_id for f in result.finals] == [0, 2]
    assert result.ended.segments == 3


async def test_bad_messages_get_errors_and_the_session_goes_on(start, talk):
    """Bad JSON, an unknown type and a torn audio frame are reported; the stream continues."""
    url, _ = await start()
    audio, _ = talk
    async with connect(url) as ws:
        assert json.loads(await ws.recv())["type"] == "session_started"
        await ws.send("{not json")
        await ws.send(json.dumps({"type": "configure"}))
        await ws.send(b"\x00\x01\x02")  # 3 bytes: not whole PCM16 samples
        async for chunk in chunks_of(audio):
            await ws.send(chunk)
        await ws.send(json.dumps({"type": "end_of_stream"}))
        messages = [json.loads(m) async for m in ws]
        assert ws.close_code == 1000
    errors = [m for m in messages if m["type"] == "error"]
    assert [e["code"] for e in errors] == ["bad_message", "bad_message", "bad_audio"]
    assert not any(e["fatal"] for e in errors)
    assert "unknown message type 'configure'" in errors[1]["message"]
    assert_finals_are_their_audio(wire_finals(messages), audio)
    assert messages[-1]["type"] == "session_ended"


@pytest.mark.parametrize(
    "query, fragment",
    [
        ("encoding=opus", "encoding must be one of"),
        ("sample_rate=0", "sample_rate"),
        ("language=de", "English-only"),
        ("diarization=true", "diarization"),
    ],
)
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
    for args in (
        {"uri": f"{url}?token=s3cret"},
        {"uri": url, "additional_headers": {"Authorization": "Bearer s3cret"}},
    ):
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


async def test_full_server_refuses_with_1013_and_keeps_serving(start, talk):
    """Past max_sessions a client gets server_busy (1013); the admitted one carries on."""
    url, _ = await start(server={"max_sessions": 1})
    audio, _ = talk
    async with connect(url) as first:
        await first.recv()
        message, code = await refused(url)
        assert (message["code"], code) == ("server_busy", 1013)
        async for chunk in chunks_of(audio):
            await first.send(chunk)
        await first.send(json.dumps({"type": "end_of_stream"}))
        messages = [json.loads(m) async for m in first]
    assert_finals_are_their_audio(wire_finals(messages), audio)


async def test_a_client_that_vanishes_does_not_disturb_another(start, talk):
    """One client sends garbage and drops its connection mid-speech; the other is unharmed.
    The dropped session waits out its resume window, then ends."""
    url, server = await start(FakeEngine(encode_s=0.02), server={"resume_window_s": 0.5})
    audio, _ = talk

    async def rude():
        ws = await connect(url)
        await ws.recv()
        await ws.send(pcm16(audio[: len(audio) // 2]))
        await ws.send("garbage")
        ws.transport.abort()  # no close handshake at all

    good = run_stream(stream_url(url, StreamConfig(), None), chunks_of(audio), 32000, fast=True)
    result, _ = await asyncio.gather(good, rude())
    assert result.errors == [] and result.close_code == 1000
    assert_finals_are_their_audio(result.finals, audio)
    await asyncio.sleep(1.0)
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


async def test_a_handshake_refused_over_http_gets_its_status_and_logs_no_error(start, caplog):
    """A WebSocket asked for where there is none (a probe, an HTTP route, an unknown
    path; the page's / is WhisperLive's wire) is 404 `not_found`; a vendor wire's wrong
    key is 401. Neither is an
    error of the server's: nothing is logged at ERROR (uvicorn's sans-I/O protocol did,
    for every refusal)."""
    url, _ = await start(token="server-key")
    base = url.removesuffix("/v1/stream")
    for path in ("/healthz", "/index.html", "/v1/models", "/v1/audio/transcriptions", "/nope"):
        with pytest.raises(InvalidStatus) as caught:
            async with connect(base + path):
                pass
        answer = caught.value.response
        assert answer.status_code == 404, path
        assert json.loads(answer.body)["error"] == "not_found", path
    with pytest.raises(InvalidStatus) as caught:
        async with connect(base + "/v1/listen", additional_headers={"Authorization": "Token no"}):
            pass
    assert caught.value.response.status_code == 401
    await asyncio.sleep(0.1)  # uvicorn logs once the application has returned
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_health_and_unknown_paths(start):
    """GET /health answers JSON with the scheduler's figures; an unknown path is a JSON 404."""
    url, _ = await start()
    base = url.replace("ws://", "http://").removesuffix("/v1/stream")
    health = await asyncio.to_thread(lambda: json.load(urllib.request.urlopen(base + "/health")))
    assert health["status"] == "ok" and health["model"] == "fake"
    assert health["asr"]["partial_interval_s"] == 1.0 and health["asr"]["jobs_done"] == 0
    with pytest.raises(urllib.error.HTTPError) as caught:
        await asyncio.to_thread(urllib.request.urlopen, base + "/nope")
    assert caught.value.code == 404
    caught.value.close()  # an open response would hold the connection until its timeout
