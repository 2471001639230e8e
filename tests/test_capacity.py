"""Admission by measured capacity: the cost per audio second (pure), and a server that,
once it has measured what a stream costs, refuses the stream past its capacity at once
(server_busy, 1013; HTTP 503 with Retry-After), says so on /readyz and /metrics, and
admits again when a stream leaves. The fake engine's encoder pass takes real time."""

import asyncio
import json
import math

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from conftest import pcm16, refused
from fake_engine import FakeEngine
from parley.core.capacity import MEASURE_AUDIO_S, CapacityPolicy, StreamCost
from parley.core.stream_diarizer import DiarizationConfig
from parley.runtime.capacity import LiveCapacity
from parley.workers.diarization import DiarizationWorker
from parley.workers.scheduler import AsrScheduler
from test_diarization_worker import CountingModels


def test_a_stream_cost_is_unknown_until_measured_and_then_follows_the_measurements():
    policy = CapacityPolicy(target_busy=0.5)
    cost = StreamCost()
    assert cost.streams(policy) == math.inf and cost.admits(10_000, policy)
    cost.observe(5.0, MEASURE_AUDIO_S - 1)  # too little audio to say
    assert cost.per_audio_s is None
    cost.observe(2.0, 20.0)
    assert cost.per_audio_s == pytest.approx(0.1) and cost.streams(policy) == pytest.approx(5)
    assert cost.admits(4, policy) and not cost.admits(5, policy)
    cost.observe(2.0 + 6.0, 40.0)  # 0.3 s per audio second lately: it moves towards it
    assert 0.1 < cost.per_audio_s < 0.3


def test_an_idle_worker_admits_one_stream_whatever_it_measured():
    policy = CapacityPolicy(target_busy=0.5)
    cost = StreamCost(prior_s_per_s=2.0)  # two worker seconds per audio second
    assert cost.streams(policy) == pytest.approx(0.25)
    assert cost.admits(0, policy) and not cost.admits(1, policy)


def test_a_prior_counts_half_against_the_first_measurement():
    cost = StreamCost(prior_s_per_s=0.2)
    assert cost.streams(CapacityPolicy(0.8)) == pytest.approx(4)
    cost.observe(2.0, 20.0)
    assert cost.per_audio_s == pytest.approx(0.15) and cost.measured


def test_a_worker_of_several_threads_carries_that_many_times_the_streams():
    policy = CapacityPolicy(target_busy=0.5)
    one, two = StreamCost(0.1), StreamCost(0.1, threads=2)
    assert one.streams(policy) == pytest.approx(5) and two.streams(policy) == pytest.approx(10)


def test_speaker_steps_cost_what_the_steady_state_steps_cost():
    """A labelled stream's diarization cost is its steady-state steps' (a whole window,
    every speaker embedded), each standing for step_s of audio: cheaper steps (a window
    still growing, or thinned under load) would make the threads look roomier than they
    are, and let in too many streams."""
    diarization = DiarizationWorker(CountingModels(), DiarizationConfig(step_s=0.5))
    capacity = LiveCapacity(
        AsrScheduler(FakeEngine(), 8), diarization, CapacityPolicy(0.6), diarization_step_s=0.5
    )
    prior = capacity.diarization_cost.per_audio_s
    stats = diarization.stats
    stats.steps, stats.busy_seconds = 400, 6.0  # mostly cheap steps
    stats.full_steps, stats.full_cost_seconds = 39, 3.9  # under 20 s of audio: not yet
    capacity.heard()
    assert capacity.diarization_cost.per_audio_s == prior
    stats.full_steps, stats.full_cost_seconds = 40, 4.0  # 0.1 s a step, a step each 0.5 s
    capacity.heard()
    assert capacity.diarization_cost.per_audio_s == pytest.approx((prior + 0.2) / 2)


async def _get(port: int, path: str) -> tuple[int, bytes]:
    async with httpx.AsyncClient() as client:
        response = await client.get(f"http://127.0.0.1:{port}{path}")
    return response.status_code, response.content


async def test_past_its_measured_capacity_the_server_refuses_new_streams_at_once(start, talk):
    audio, _ = talk
    url, server = await start(FakeEngine(encode_s=0.4))
    query = "?encoding=pcm_s16le&sample_rate=16000&partials=false"
    async with connect(url + query) as ws:  # the measured stream
        await ws.recv()
        for _ in range(math.ceil(MEASURE_AUDIO_S / (len(audio) / 16000)) + 1):
            for i in range(0, len(audio), 3200):
                await ws.send(pcm16(audio[i : i + 3200]))
        await ws.send(json.dumps({"type": "end_of_stream"}))
        async for _ in ws:
            pass
    carried = server.endpoint.capacity.streams()["asr"]
    assert 1 <= carried < 16, carried  # measured, and below max_sessions
    status, body = await _get(server.port, "/readyz")
    assert status == 200 and json.loads(body)["checks"]["at_capacity"] is False

    held = []
    for _ in range(int(carried)):
        ws = await connect(url)
        assert json.loads(await ws.recv())["type"] == "session_started"
        held.append(ws)
    message, code = await refused(url)
    assert (message["code"], code) == ("server_busy", 1013)
    assert "measured capacity" in message["message"]
    with pytest.raises(InvalidStatus) as http_refusal:  # Deepgram's wire refuses in HTTP
        listen = "/v1/listen?encoding=linear16&sample_rate=16000"
        async with connect(f"ws://127.0.0.1:{server.port}{listen}"):
            pass
    response = http_refusal.value.response
    assert response.status_code == 503 and response.headers["Retry-After"] == "10"
    status, body = await _get(server.port, "/readyz")
    assert status == 503 and json.loads(body)["checks"]["at_capacity"] is True
    _, metrics = await _get(server.port, "/metrics")
    used = next(
        line for line in metrics.decode().splitlines() if line.startswith("parley_capacity_used ")
    )
    assert float(used.split()[1]) == pytest.approx(len(held) / carried)

    await held.pop().close()  # one leaves: one more may come
    await asyncio.sleep(0.1)
    async with connect(url) as again:
        assert json.loads(await again.recv())["type"] == "session_started"
    for ws in held:
        await ws.close()


async def test_admission_by_capacity_can_be_turned_off(start, talk):
    """``server.admit_by_capacity=false``: only ``max_sessions`` bounds sessions."""
    url, server = await start(FakeEngine(encode_s=0.4), server={"admit_by_capacity": False})
    assert server.endpoint.capacity is None
    status, body = await _get(server.port, "/readyz")
    assert status == 200 and json.loads(body)["checks"]["at_capacity"] is False
