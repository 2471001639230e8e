"""Parley on a real Ray cluster on loopback: three Ray nodes (ray.cluster_utils), two of
them with one logical GPU each, Ray Serve's proxy in front, real WebSocket clients.

Replicas decode with the fake engine (tests/fake_engine.py, imported by the replicas
from PYTHONPATH): these tests are about placement, admission and draining, and each
session's finals are compared with a single server's for the same audio. The tests
run in order on one deployment: it starts with one replica, may grow to two (one per
GPU node), holds one session per replica, and is then redeployed down to one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path

import pytest
import ray
from ray import serve
from ray.cluster_utils import Cluster
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from conftest import chunks_of, free_port, serve_fake
from fake_engine import load_fake_asr
from parley.client.live import LiveStream
from parley.client.stream import run_stream, stream_url
from parley.cluster.run import PROXY_READY_ENV
from parley.config import Settings
from parley.protocol.messages import Final, StreamConfig

KEY = "cluster-test-key"
OBJECT_STORE = 100 * 2**20  # sessions pass no objects through it; Ray's default is 30 % of RAM
# Read by Ray's processes when they start: the proxy and replicas push autoscaling
# metrics every half second, not every ten, so the autoscaler sees sessions at once.
RAY_ENV = {
    "RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "0.5",
    "RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "0.5",
    "RAY_DEDUP_LOGS": "0",
    **PROXY_READY_ENV,
    # the replicas read their API keys from their own environment, never from Ray
    "PARLEY_API_KEYS": json.dumps({"test": KEY}),
    "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
}


def cluster_settings(port: int, **cluster) -> Settings:
    # A session waits while the autoscaler starts a replica: longer than the default
    # idle timeout, and these sessions say nothing meanwhile.
    return Settings(
        server={"max_sessions": 1, "drain_timeout_s": 15, "idle_timeout_s": 120},
        cluster={
            "port": port,
            "proxy_location": "HeadOnly",
            "num_cpus": 0,
            "num_gpus": 1,
            "max_queued_sessions": 1,
            **cluster,
        },
    )


@pytest.fixture(scope="module")
def cluster():
    """A head node (Serve's controller and proxy) and two worker nodes with one GPU each;
    Parley deployed with one replica, autoscaling to two on live sessions."""
    from parley.cluster.run import start

    saved = {name: os.environ.get(name) for name in RAY_ENV}
    os.environ.update(RAY_ENV)
    nodes = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "include_dashboard": False,
            "object_store_memory": OBJECT_STORE,
        },
    )
    for _ in range(2):
        nodes.add_node(num_cpus=1, num_gpus=1, object_store_memory=OBJECT_STORE)
    try:
        ray.init(address=nodes.address, logging_level="warning")
        port = free_port()
        start(
            cluster_settings(
                port,
                replicas=1,
                max_replicas=2,
                target_sessions=1,
                upscale_delay_s=0,
                downscale_delay_s=600,
                look_back_s=11,
            ),
            load_fake_asr,
        )
        assert running_replicas() == 1
        yield f"ws://127.0.0.1:{port}", port
    finally:
        serve.shutdown()
        ray.shutdown()
        nodes.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def running_replicas() -> int:
    status = serve.status().applications["parley"].deployments["parley"]
    return status.replica_states.get("RUNNING", 0)


@pytest.fixture(scope="module")
def audio(talk):
    return talk[0]


@pytest.fixture(scope="module")
async def single_server_finals(audio):
    """What one plain server makes of the test audio: whole, and cut off mid-turn."""
    server = await serve_fake()
    try:
        url = f"ws://127.0.0.1:{server.port}/v1/stream"
        finals = {}
        for name, clip in (("whole", audio), ("cut", cut_mid_turn(audio))):
            result = await run_stream(
                stream_url(url, StreamConfig(), KEY), chunks_of(clip), 32000, fast=True
            )
            finals[name] = spans(result.finals)
        assert len(finals["whole"]) == 3 and len(finals["cut"]) == 3  # three turns
        return finals
    finally:
        await server.stop()


def cut_mid_turn(audio):
    """The audio up to the middle of its last turn: a segment still open at the end."""
    return audio[: int(len(audio) * 0.9)]


def spans(finals: list[Final]) -> list[tuple[str, float, float]]:
    return [(f.text, f.start, f.end) for f in finals]


def node_of(session: LiveStream) -> str:
    return session.started.server.split("/")[0]


# A session queued at the proxy waits while the autoscaler starts a replica: on two
# cores shared with the rest of the suite, that took over the client's default 30 s.
OPEN_TIMEOUT_S = 150


async def open_session(base: str) -> LiveStream:
    return await LiveStream.connect(
        f"{base}/v1/stream", StreamConfig(), token=KEY, open_timeout=OPEN_TIMEOUT_S
    )


async def stream_all(session: LiveStream, clip, end: bool = True) -> None:
    async for chunk in chunks_of(clip):
        await session.send(chunk)
    if end:
        await session.end()


async def results(session: LiveStream) -> list[Final]:
    return [m async for m in session if isinstance(m, Final)]


async def test_sessions_spread_over_nodes_the_cap_holds_and_the_autoscaler_adds_replicas(
    cluster, audio, single_server_finals
):
    base, _ = cluster
    first = await open_session(base)
    # One replica, one session each: the next session waits at the proxy, and the
    # autoscaler, seeing two sessions for one replica, starts a second on the other node.
    second = await open_session(base)
    assert running_replicas() == 2
    assert second.started.server != first.started.server
    assert node_of(second) != node_of(first)

    # Two replicas at the most, one session each: a third session waits for a free one.
    third = asyncio.ensure_future(open_session(base))
    await asyncio.sleep(3)
    assert not third.done()
    # ... and with max_queued_sessions (1) waiting, the next is refused at the handshake
    # by Ray's proxy: with 503 for HTTP, but a WebSocket gets 500 from Ray 2.60.
    with pytest.raises(InvalidStatus) as full:
        await open_session(base)
    assert full.value.response.status_code in (500, 503)
    await stream_all(first, audio)
    assert spans(await results(first)) == single_server_finals["whole"]
    assert first.ended.reason == "end_of_stream" and first.close_code == 1000

    third = await asyncio.wait_for(third, 30)  # served where the first session was
    assert third.started.server == first.started.server
    for session in (second, third):
        await stream_all(session, audio)
        assert spans(await results(session)) == single_server_finals["whole"]


async def test_a_replica_that_goes_away_finalizes_its_sessions_first(
    cluster, audio, single_server_finals
):
    """Both replicas hold a session whose last turn is still open; a redeploy down to
    one replica stops the old replicas one by one, the way Ray Serve stops a replica on
    a downscale. A stopped replica's session still gets the finals of all the audio it
    sent, then session_ended (shutting_down) and close 1001."""
    base, port = cluster
    sessions = [await open_session(base) for _ in range(2)]
    assert len({s.started.server for s in sessions}) == 2
    clip = cut_mid_turn(audio)
    for session in sessions:
        await stream_all(session, clip, end=False)
    collecting = [asyncio.ensure_future(results(s)) for s in sessions]
    await asyncio.sleep(2)  # the last audio has reached the replicas

    from parley.cluster.run import start

    await asyncio.wait_for(
        asyncio.to_thread(start, cluster_settings(port, replicas=1), load_fake_asr), 90
    )
    await asyncio.sleep(1)
    drained = []
    for session, finals in zip(sessions, collecting):
        if not finals.done():  # its replica stayed: end it as a client does
            with contextlib.suppress(ConnectionClosed):
                await session.end()
        assert spans(await asyncio.wait_for(finals, 30)) == single_server_finals["cut"]
        if session.ended.reason == "shutting_down":
            assert session.close_code == 1001
            drained.append(session)
    assert drained, "no session was on a replica that went away"
    assert running_replicas() == 1


async def test_refusals_keep_their_wire_through_the_proxy(cluster):
    """Keys come from the replicas' environment; a refusal is the same as on one server:
    Parley's own wire answers with an error and close 4401, Deepgram's with HTTP 401."""
    base, _ = cluster
    async with connect(f"{base}/v1/stream") as ws:
        error = json.loads(await ws.recv())
        await ws.wait_closed()
    assert error["code"] == "unauthorized" and ws.close_code == 4401
    with pytest.raises(InvalidStatus) as refused:
        await connect(f"{base}/v1/listen?encoding=linear16&sample_rate=16000")
    assert refused.value.response.status_code == 401


def test_probes_and_the_page_through_the_proxy(cluster):
    import urllib.request

    _, port = cluster
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz") as answer:
        assert json.load(answer)["status"] == "ready"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/") as page:
        assert page.headers["Content-Type"].startswith("text/html")
        assert b"<html" in page.read().lower()


async def test_a_drained_node_hands_its_sessions_over_finalized(
    cluster, audio, single_server_finals
):
    """What a KubeRay worker pod's preStop does (deploy/kubernetes/rayservice.yaml):
    `ray drain-node` on the node of a live session. Serve starts a replica elsewhere
    and stops this one, which finalizes the session; a new session lands on the other
    node."""
    base, _ = cluster
    session = await open_session(base)
    clip = cut_mid_turn(audio)
    await stream_all(session, clip, end=False)
    finals = asyncio.ensure_future(results(session))
    await asyncio.sleep(2)
    node = next(
        n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"].startswith(node_of(session))
    )
    drain = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ray.scripts.scripts",
        "drain-node",
        "--address",
        ray.get_runtime_context().gcs_address,
        "--node-id",
        node,
        "--reason",
        "DRAIN_NODE_REASON_PREEMPTION",
        "--reason-message",
        "test",
        "--deadline-remaining-seconds",
        "60",
    )
    assert await drain.wait() == 0
    assert spans(await asyncio.wait_for(finals, 60)) == single_server_finals["cut"]
    assert session.ended.reason == "shutting_down" and session.close_code == 1001
    successor = await open_session(base)  # on a replica Serve may still be starting
    assert node_of(successor) != node_of(session)
    await successor.end()
    await results(successor)
