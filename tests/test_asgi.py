"""The ASGI adapter a Ray Serve replica serves through (parley/transport/asgi.py), under
uvicorn, the ASGI server of Ray Serve's proxy, without Ray: the same wire as
`parley serve`, down to its errors, refusals, close codes and drain."""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.error
import urllib.request

import pytest
import uvicorn
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from conftest import assert_finals_are_their_audio, chunks_of, free_port
from fake_engine import load_fake_asr
from parley.client.stream import run_stream, stream_url
from parley.config import Settings
from parley.protocol.messages import StreamConfig
from parley.service import start_service
from parley.transport.admission import Access
from parley.transport.auth import ApiKeys, OriginPolicy

KEY = "asgi-test-key"


class Uvicorn(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):  # leave Ctrl-C to the test run
        yield


@pytest.fixture
async def served():
    """The pipeline behind AsgiApp under uvicorn on a free port, with one API key."""
    from parley.transport.asgi import AsgiApp

    settings = Settings(server={"max_frame_bytes": 4096})
    worker, asr = load_fake_asr(settings)
    access = Access(ApiKeys.of({"test": KEY}), OriginPolicy.of(None))
    service = await start_service(settings, worker, asr, access, warm_up=False)
    port = free_port()
    server = Uvicorn(
        uvicorn.Config(
            AsgiApp(service), host="127.0.0.1", port=port, lifespan="on", log_level="warning"
        )
    )
    serving = asyncio.ensure_future(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    yield f"ws://127.0.0.1:{port}", service
    await service.stop()
    server.should_exit = True
    await serving


async def test_a_stream_gets_the_finals_of_its_audio(served, talk):
    base, _ = served
    audio, truth = talk
    result = await run_stream(
        stream_url(f"{base}/v1/stream", StreamConfig(), KEY), chunks_of(audio), 32000, fast=True
    )
    assert result.errors == [] and result.close_code == 1000
    assert len(result.finals) == len(truth)
    assert_finals_are_their_audio(result.finals, audio)


async def test_errors_and_refusals_keep_their_codes(served):
    base, _ = served
    async with connect(f"{base}/v1/stream") as ws:  # no key: error, then 4401
        assert json.loads(await ws.recv())["code"] == "unauthorized"
        await ws.wait_closed()
    assert ws.close_code == 4401
    async with connect(f"{base}/v1/stream?token={KEY}") as ws:
        assert json.loads(await ws.recv())["type"] == "session_started"
        await ws.send("{not json")  # non-fatal: an error, and the session goes on
        assert json.loads(await ws.recv())["code"] == "bad_message"
        await ws.send(b"\0" * 8192)  # over max_frame_bytes: fatal, 1009
        assert json.loads(await ws.recv())["code"] == "frame_too_large"
        await ws.wait_closed()
    assert ws.close_code == 1009
    with pytest.raises(InvalidStatus) as refused:  # Deepgram's wire refuses in HTTP
        await connect(f"{base}/v1/listen?encoding=linear16&sample_rate=16000")
    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body)["err_code"] == "UNAUTHORIZED"


async def test_a_drain_finalizes_the_open_segment(served, talk):
    base, service = served
    audio, _ = talk
    async with connect(f"{base}/v1/stream?token={KEY}") as ws:
        await ws.recv()
        async for chunk in chunks_of(audio[: int(len(audio) * 0.9)]):
            await ws.send(chunk)
        await asyncio.sleep(0.5)
        drain = asyncio.ensure_future(service.endpoint.drain(10))
        messages = [json.loads(m) async for m in ws]
        await drain
    assert messages[-1]["type"] == "session_ended"
    assert messages[-1]["reason"] == "shutting_down" and ws.close_code == 1001
    assert len([m for m in messages if m["type"] == "final"]) >= 1


async def test_http_answers(served):
    base, _ = served
    http = base.replace("ws://", "http://")

    def status_of(path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"{http}{path}") as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    status, body = await asyncio.to_thread(status_of, "/readyz")  # the server is on this loop
    assert status == 200 and json.loads(body)["status"] == "ready"
    assert (await asyncio.to_thread(status_of, "/nothing-here"))[0] == 404
    assert (await asyncio.to_thread(status_of, "/v1/stream"))[0] == 426
