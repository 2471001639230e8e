"""Session resume (protocol.md section 6a): a stream whose connection is cut, through a
fault-injecting proxy, resumes with its token and ends with the transcript an
uninterrupted stream gets, word for word; a resume after the window, with another
key's token, or with any malformed parameters gets a documented error. Real sockets
on loopback, the fake engine."""

import asyncio
import json
import random
import time
import urllib.parse

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from conftest import pcm16
from fake_engine import FakeEngine
from fault_proxy import FaultProxy, Faults
from parley.client.live import LiveStream, send_paced
from parley.client.stream import stream_url
from parley.protocol.messages import Final, StreamConfig

CONFIG = StreamConfig(partials=False)


async def _finals(url: str, audio: np.ndarray) -> tuple[list[Final], LiveStream]:
    """Stream ``audio`` as fast as the server reads; every final, and the stream."""
    live = await LiveStream.open(stream_url(url, CONFIG, None))
    data = pcm16(audio)

    async def chunks():
        for i in range(0, len(data), 3200):  # 100 ms messages
            yield data[i : i + 3200]

    sender = asyncio.create_task(send_paced(live, chunks(), 32000, fast=True))
    finals = [m async for m in live if isinstance(m, Final)]
    await sender
    await live.close()
    return finals, live


async def test_a_stream_cut_five_times_resumes_to_the_same_transcript(start, talk):
    """Five cuts at random points (mid-frame included, no close handshake): the client
    resumes each time, and its finals equal an uninterrupted stream's, none twice, none
    missing."""
    audio, _ = talk
    audio = np.concatenate([audio] * 4)  # about 35 s, 1.1 MB of PCM16
    url, server = await start(FakeEngine(encode_s=0.005))
    whole, _ = await _finals(url, audio)
    cuts = random.Random(7).sample(range(40_000, 200_000), 5)
    async with FaultProxy(server.port, Faults(cut_after=cuts)) as proxy:
        cut, live = await _finals(f"ws://127.0.0.1:{proxy.port}/v1/stream", audio)
    assert proxy.cuts == 5 and live.resumes == 5
    assert cut == whole and len(whole) >= 8
    assert live.ended is not None and live.ended.audio_duration == round(len(audio) / 16000, 3)


async def _dropped_session(url: str, seconds: float = 1.0) -> dict:
    """Start a session, send some audio, and vanish without a close handshake."""
    ws = await connect(url)
    started = json.loads(await ws.recv())
    await ws.send(pcm16(np.zeros(int(16000 * seconds), np.float32)))
    await asyncio.sleep(0.05)
    ws.transport.abort()
    return started


async def _first_answer(url: str) -> tuple[dict, int | None]:
    async with connect(url) as ws:
        first = json.loads(await ws.recv())
        if first["type"] == "session_resumed":
            await ws.send(json.dumps({"type": "end_of_stream"}))
            async for _ in ws:
                pass
        else:
            try:
                await ws.recv()
            except ConnectionClosed:
                pass
    return first, ws.close_code


async def test_a_resume_tells_what_audio_arrived_and_after_the_window_is_refused(start):
    url, server = await start(server={"resume_window_s": 0.5})
    started = await _dropped_session(url, seconds=1.0)
    token = started["resume_token"]
    assert started["limits"]["resume_window_s"] == 0.5
    resumed, code = await _first_answer(f"{url}?resume={token}&last_seq=0")
    assert resumed == {
        "type": "session_resumed",
        "session_id": started["session_id"],
        "audio_received_bytes": 32000,
        "last_seq": resumed["last_seq"],
    }
    assert code == 1000
    started = await _dropped_session(url)
    await asyncio.sleep(0.8)  # past the window: the session ended as after end_of_stream
    late, code = await _first_answer(f"{url}?resume={started['resume_token']}")
    assert (late["code"], code) == ("not_found", 4404)
    assert server.endpoint.live_sessions == 0


async def test_a_token_resumes_only_for_the_key_it_was_given_to(start):
    url, _ = await start(api_keys={"ada": "key-a", "bob": "key-b"})
    started = await _dropped_session(f"{url}?token=key-a")
    token = started["resume_token"]
    other, code = await _first_answer(f"{url}?resume={token}&token=key-b")
    assert (other["code"], code) == ("not_found", 4404)
    none, code = await _first_answer(f"{url}?resume={token}")
    assert (none["code"], code) == ("unauthorized", 4401)
    own, code = await _first_answer(f"{url}?resume={token}&token=key-a")
    assert own["type"] == "session_resumed" and code == 1000


async def test_sessions_that_cannot_resume_say_so(start):
    """A server with resume_window_s 0 gives no token; a resume on another wire is
    bad_config."""
    url, server = await start(server={"resume_window_s": 0})
    async with connect(url) as ws:
        assert "resume_token" not in json.loads(await ws.recv())
    meeting = url.replace("/v1/stream", "/v1/meeting")
    answer, code = await _first_answer(f"{meeting}?resume=abc")
    assert (answer["code"], code) == ("bad_config", 4400)


DOCUMENTED = {("not_found", 4404), ("bad_config", 4400)}


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    resume=st.text(max_size=40),
    last_seq=st.one_of(st.none(), st.text(max_size=14), st.integers(-5, 10**13).map(str)),
    extra=st.dictionaries(
        st.sampled_from(["encoding", "language", "x", "last_seq"]), st.text(max_size=5), max_size=2
    ),
)
@example(resume="", last_seq="\u00b9", extra={})  # a superscript one: a digit to str.isdigit
def test_any_resume_parameters_get_a_documented_answer(threaded_fake_port, resume, last_seq, extra):
    """Whatever ``resume`` and ``last_seq`` hold (and whatever else comes with them),
    the answer is a documented error and close code, never internal_error."""
    from websockets.sync.client import connect as connect_sync

    query = {**extra, "resume": resume}
    if last_seq is not None:
        query["last_seq"] = last_seq
    url = f"ws://127.0.0.1:{threaded_fake_port}/v1/stream?{urllib.parse.urlencode(query)}"
    with connect_sync(url) as ws:
        first = json.loads(ws.recv(timeout=5))
        try:
            ws.recv(timeout=5)
        except ConnectionClosed:
            pass
    assert (first["code"], ws.close_code) in DOCUMENTED, first


async def test_a_session_opened_with_an_access_token_resumes_after_it_expires(start):
    """A page's token is short-lived and its stream long: the session's resume_token is
    the proof, so the expired token of its key still resumes it (a forged one does
    not), while no new session opens with that token."""
    from parley.transport import access_tokens

    url, _ = await start(api_keys={"ada": "key-a"})
    token, _ = access_tokens.mint("ada", b"key-a", 1, time.time())
    started = await _dropped_session(f"{url}?token={token}")
    await asyncio.sleep(1.1)  # the access token has expired
    fresh, code = await _first_answer(f"{url}?token={token}")
    assert (fresh["code"], code) == ("unauthorized", 4401)
    forged, _ = access_tokens.mint("ada", b"not-key-a", 60, time.time())
    refused, code = await _first_answer(f"{url}?resume={started['resume_token']}&token={forged}")
    assert (refused["code"], code) == ("unauthorized", 4401)
    resumed, code = await _first_answer(f"{url}?resume={started['resume_token']}&token={token}")
    assert resumed["type"] == "session_resumed" and code == 1000


async def test_a_server_stopped_while_a_session_waits_to_resume_logs_no_error(caplog):
    """Stopped at once (a second signal), not drained, with a session waiting for its
    client: the session ends as shutting_down, and nothing is logged as an error (its
    cancelled wait reached uvicorn as an exception in the application)."""
    import logging

    from conftest import serve_fake

    server = await serve_fake()
    url = f"ws://127.0.0.1:{server.port}/v1/stream"
    await _dropped_session(url)
    await asyncio.sleep(0.2)  # the server has seen the connection go
    await server.stop()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
    ended = server.metrics.registry.get_sample_value(
        "parley_sessions_total", {"outcome": "shutting_down"}
    )
    assert ended == 1
