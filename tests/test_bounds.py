"""Bounds on the messages that could buy the server much work or hold it up: a follower
that cannot hang, a meeting's participant cap, a timestamp gap that costs nothing, and
the open segment not copied per message. Real servers on loopback, the fake engine."""

import asyncio
import base64
import contextlib
import json
import time

import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from conftest import pcm16
from parley.protocol.messages import Partial
from parley.transport.auth import ANONYMOUS
from parley.transport.followers import FOLLOWER_QUEUE, FOLLOWERS_PER_SESSION


async def _session_started(ws) -> dict:
    message = json.loads(await ws.recv())
    assert message["type"] == "session_started"
    return message


async def _all(ws) -> list:
    """Every message until the close, whatever its code."""
    received = []
    with contextlib.suppress(ConnectionClosed):
        while True:
            received.append(await ws.recv())
    return received


async def test_a_follower_ends_even_when_its_queue_filled_as_the_session_ended(start):
    """A burst that fills a follower's queue in the same turn of the loop as the
    session's end still leaves the follower a way out: it is closed (1013, fell behind),
    never left waiting for an end marker that found no room."""
    url, server = await start()
    followers = server.service.followers
    async with connect(url) as stream:
        session_id = (await _session_started(stream))["session_id"]
        follow = f"ws://127.0.0.1:{server.port}/v1/sessions/{session_id}/events"
        for burst in (FOLLOWER_QUEUE - 1, FOLLOWER_QUEUE, FOLLOWER_QUEUE + 1):
            async with connect(follow) as follower:
                assert json.loads(await follower.recv())["type"] == "following"
                for i in range(burst):  # no await between them: the follower cannot read
                    followers.publish(session_id, Partial(0, 0.0, 1.0, f"word {i}"))
                followers.closed(session_id)
                received = await asyncio.wait_for(_all(follower), timeout=5)
            assert follower.close_code in (1000, 1013)
            if follower.close_code == 1000:
                assert len(received) == burst
            followers.opened(session_id, ANONYMOUS)  # follow the same session again


async def test_a_session_has_at_most_its_followers_cap(start):
    """FOLLOWERS_PER_SESSION followers of one session are served; one more is refused
    with too_many_sessions (4429); once one leaves, another is taken."""
    url, server = await start()
    async with connect(url) as stream, contextlib.AsyncExitStack() as stack:
        session_id = (await _session_started(stream))["session_id"]
        follow = f"ws://127.0.0.1:{server.port}/v1/sessions/{session_id}/events"
        followers = []
        for _ in range(FOLLOWERS_PER_SESSION):
            follower = await stack.enter_async_context(connect(follow))
            assert json.loads(await follower.recv())["type"] == "following"
            followers.append(follower)
        async with connect(follow) as refused:
            assert json.loads(await refused.recv())["code"] == "too_many_sessions"
            await asyncio.wait_for(_all(refused), timeout=5)
        assert refused.close_code == 4429
        await followers[0].close()
        await asyncio.sleep(0.1)  # its handler has let go of its queue
        async with connect(follow) as taken:
            assert json.loads(await taken.recv())["type"] == "following"


async def test_a_meeting_carries_at_most_its_participant_cap(start):
    """10,000 invented participant ids on one connection: the first
    ``limits.max_participants`` get tracks, every other one's audio gets
    ``too_many_participants`` and is dropped, the meeting ends normally, and the server
    goes on serving."""
    url, server = await start()
    invented, chunk = 10_000, pcm16(np.zeros(160, np.float32))
    async with connect(f"ws://127.0.0.1:{server.port}/v1/meeting") as ws:
        cap = (await _session_started(ws))["limits"]["max_participants"]

        async def send():
            for i in range(invented):
                await ws.send(
                    json.dumps(
                        {
                            "type": "audio",
                            "participant": {"id": f"p{i}"},
                            "audio": base64.b64encode(chunk).decode(),
                        }
                    )
                )
            await ws.send(json.dumps({"type": "end_of_stream"}))

        sending = asyncio.create_task(send())
        received = [json.loads(m) for m in await _all(ws)]
        await sending
    refused = [m for m in received if m.get("code") == "too_many_participants"]
    assert cap == 64 and len(refused) == invented - cap
    assert received[-1]["type"] == "session_ended" and ws.close_code == 1000
    async with connect(url) as again:  # still serving
        assert (await _session_started(again))["type"] == "session_started"


async def test_an_hour_gap_in_a_timed_track_costs_under_10_ms():
    """A meeting participant's timestamp an hour ahead moves the track's clock an hour
    at a cost (CPU time of the loop's thread) under 10 ms; the audio after it is at its
    meeting time (that skipping is feeding zeros is test_vad's property test)."""
    from fake_engine import FakeEngine
    from parley.core.vad import VadConfig
    from parley.protocol.messages import StreamConfig
    from parley.sessions.session import Session
    from parley.sessions.session_options import SessionOptions
    from parley.transport.timed_track import TimedTrack
    from parley.workers.scheduler import AsrScheduler

    worker = AsrScheduler(FakeEngine(), capacity=8)
    await worker.start()
    try:
        config = StreamConfig(partials=False)
        costs = {}
        for gap_s in (1.0, 3600.0):
            session = Session(config, worker, SessionOptions(VadConfig()))
            track = TimedTrack(config)
            await track.feed(session, pcm16(np.zeros(1600, np.float32)), 0.0)
            began = time.thread_time()
            await track.feed(session, pcm16(np.zeros(160, np.float32)), gap_s)
            costs[gap_s] = time.thread_time() - began
            assert session.stream_time == gap_s + 0.01
            session.close()
    finally:
        await worker.stop()
    assert costs[3600.0] < 0.010, costs


async def test_audio_a_session_has_not_read_is_capped_in_bytes():
    """The connection reads ahead of its session at most INBOX_BYTES (and one message);
    past that it stops taking messages from the ASGI server, which stops reading the
    socket, so a client sending faster than its session reads holds no more memory."""
    from parley.transport.asgi import INBOX_BYTES, AsgiConnection, request_of

    size, offered, taken = 256 * 1024, 64, []

    async def receive() -> dict:
        if len(taken) == offered:
            await asyncio.Event().wait()  # nothing more: as a quiet client
        taken.append(len(taken))
        return {"type": "websocket.receive", "bytes": bytes([len(taken) % 256]) * size}

    async def send(message: dict) -> None:
        pass

    connection = AsgiConnection(request_of({"path": "/v1/stream", "headers": []}), receive, send)
    await asyncio.sleep(0.2)
    assert connection.queued_bytes <= INBOX_BYTES + size
    assert len(taken) <= INBOX_BYTES // size + 2
    first = await connection.recv()
    assert first[0] == 1 and len(first) == size  # in order, none lost
    await asyncio.sleep(0.05)
    assert connection.queued_bytes <= INBOX_BYTES + size
    await connection.stop_reading()
