"""Clients that stop sending, over raw sockets on loopback against a fake-engine server:
a request whose head never ends, an upload whose body stops, and more uploads at once
than the server receives (protocol.md section 16, "Limits and errors")."""

from __future__ import annotations

import asyncio
import json
import logging
import tempfile
import time

import httpx
import pytest

from audio_fixtures import conversation, write_wav
from conftest import serve_fake

KEY = "slow-clients-key"
IDLE_S = 0.5


@pytest.fixture(scope="module")
async def server():
    running = await serve_fake(
        token=KEY, server={"idle_timeout_s": IDLE_S}, files={"max_receiving": 1, "max_jobs": 1}
    )
    yield running
    await running.stop()


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory):
    audio, _ = conversation([("en-us", "Hello there, this is a short recording.")])
    return write_wav(tmp_path_factory.mktemp("slow") / "short.wav", audio).read_bytes()


def _form_head(path: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {KEY}\r\n"
        "Content-Type: multipart/form-data; boundary=b\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


FORM_START = b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\nRIFF'


async def _open(server, sent: bytes):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(sent)
    await writer.drain()
    return reader, writer


async def _answer(reader, within_s: float) -> tuple[int | None, dict, bytes]:
    """The status, headers and body of the server's next answer (None: it closed the
    connection with nothing sent)."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), within_s)
    except asyncio.IncompleteReadError as closed:
        assert closed.partial == b""
        return None, {}, b""
    lines = head.decode().strip().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    body = await reader.readexactly(int(headers.get("content-length", 0)))
    return int(lines[0].split()[1]), headers, body


async def test_an_upload_whose_body_stops_is_answered_408_and_forgotten(
    server, tmp_path, monkeypatch
):
    """No byte of the body for idle_timeout_s: 408 idle_timeout in each API's shape, the
    connection closed, the temporary file gone, the outcome counted."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    openai, openai_writer = await _open(
        server, _form_head("/v1/audio/transcriptions", 100_000) + FORM_START
    )
    status, headers, body = await _answer(openai, 5 * IDLE_S)
    assert status == 408 and headers["connection"] == "close"
    assert json.loads(body)["error"]["code"] == "idle_timeout"
    deepgram, deepgram_writer = await _open(
        server,
        f"POST /v1/listen HTTP/1.1\r\nHost: test\r\nAuthorization: Token {KEY}\r\n"
        "Content-Length: 100000\r\n\r\nRIFF".encode(),
    )
    status, _, body = await _answer(deepgram, 5 * IDLE_S)
    assert status == 408 and json.loads(body)["err_code"] == "IDLE_TIMEOUT"
    for writer in (openai_writer, deepgram_writer):
        writer.close()
    assert list(tmp_path.glob("parley-upload-*")) == []
    async with httpx.AsyncClient() as client:
        metrics = (await client.get(f"http://127.0.0.1:{server.port}/metrics")).text
    assert 'parley_file_jobs_total{outcome="idle_timeout"} 2.0' in metrics


async def test_an_upload_that_trickles_is_answered_408(server):
    """Ten bytes every fifth of the idle timeout: never idle, but past the first
    idle_timeout_s it has come slower than MIN_BYTES_PER_S, and gets 408."""
    from parley.transport.upload_body import MIN_BYTES_PER_S

    reader, writer = await _open(
        server, _form_head("/v1/audio/transcriptions", 100_000) + FORM_START
    )
    started = asyncio.get_running_loop().time()

    async def trickle():
        while not writer.is_closing():
            writer.write(b"0" * 10)
            await asyncio.sleep(IDLE_S / 5)

    trickling = asyncio.ensure_future(trickle())
    status, _, body = await _answer(reader, 10 * IDLE_S)
    trickling.cancel()
    writer.close()
    assert status == 408 and str(MIN_BYTES_PER_S) in json.loads(body)["error"]["message"]
    assert asyncio.get_running_loop().time() - started < 4 * IDLE_S


async def test_a_client_that_leaves_mid_upload_is_counted_not_logged_as_an_error(
    server, tmp_path, monkeypatch, caplog
):
    """Closing the connection halfway through the body: the upload's temporary file is
    gone, its outcome counted as cancelled, and no error logged."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    metrics_url = f"http://127.0.0.1:{server.port}/metrics"
    async with httpx.AsyncClient() as client:
        before = (await client.get(metrics_url)).text
        reader, writer = await _open(
            server, _form_head("/v1/audio/transcriptions", 100_000) + FORM_START + b"0" * 5000
        )
        await asyncio.sleep(IDLE_S / 5)
        writer.close()
        await asyncio.sleep(IDLE_S / 2)
        after = (await client.get(metrics_url)).text
    assert _count(after, "cancelled") == _count(before, "cancelled") + 1
    assert list(tmp_path.glob("parley-upload-*")) == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def _count(metrics: str, outcome: str) -> float:
    line = f'parley_file_jobs_total{{outcome="{outcome}"}} '
    return sum(float(x[len(line) :]) for x in metrics.splitlines() if x.startswith(line))


async def test_uploads_past_the_receiving_bound_are_refused_before_they_are_read(
    server, speech_wav
):
    """files.max_receiving (1 here): while one body arrives, another upload gets 429
    server_busy with Retry-After before its own body is sent; once the first ends, the
    next is taken."""
    url = f"http://127.0.0.1:{server.port}/v1/audio/transcriptions"
    first, first_writer = await _open(
        server, _form_head("/v1/audio/transcriptions", 100_000) + FORM_START
    )
    await asyncio.sleep(IDLE_S / 5)  # the first is being received
    second, second_writer = await _open(
        server, _form_head("/v1/audio/transcriptions", len(speech_wav) + 200)
    )
    status, headers, body = await _answer(second, IDLE_S * 0.8)  # before the first's timeout
    assert status == 429 and headers["retry-after"] == "5"
    error = json.loads(body)["error"]
    assert error["code"] == "server_busy" and "receiving" in error["message"]
    assert (await _answer(first, 5 * IDLE_S))[0] == 408
    for writer in (first_writer, second_writer):
        writer.close()
    async with httpx.AsyncClient(timeout=30) as client:
        taken = await client.post(
            url, files={"file": ("a.wav", speech_wav)}, headers={"Authorization": f"Bearer {KEY}"}
        )
    assert taken.status_code == 200, taken.text


async def test_a_request_refused_for_want_of_a_job_slot_is_refused_before_its_body(server):
    """Every job slot taken: the 429 comes back for the head alone, the body unsent."""
    with server.service.file_jobs.slot():
        reader, writer = await _open(server, _form_head("/v1/audio/transcriptions", 10_000_000))
        status, _, body = await _answer(reader, 5.0)
        writer.close()
    assert status == 429 and json.loads(body)["error"]["code"] == "server_busy"


async def test_a_request_head_must_arrive_within_the_idle_timeout(server):
    """A connection that sends nothing is closed; one whose head stops halfway gets 408
    then is closed, the first request of a connection or a later one; a head sent whole
    is served."""
    silent, silent_writer = await _open(server, b"")
    started = time.monotonic()
    assert (await _answer(silent, 10 * IDLE_S))[0] is None
    assert IDLE_S * 0.9 <= time.monotonic() - started
    half, half_writer = await _open(server, b"GET /healthz HTTP/1.1\r\nHo")
    status, _, body = await _answer(half, 10 * IDLE_S)
    assert status == 408 and b"too slowly" in body
    later, later_writer = await _open(server, b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
    assert (await _answer(later, 5.0))[0] == 200
    later_writer.write(b"GET /healthz HTTP/1.1\r\nHo")  # the next request's head stops
    status, _, _ = await _answer(later, 10 * IDLE_S)
    assert status == 408
    for writer in (silent_writer, half_writer, later_writer):
        writer.close()


async def test_a_request_head_is_bounded_in_size(server):
    """A head of MAX_HEAD_BYTES is served; one byte more (its end not yet come) is
    answered 431 and closed, not gathered for as long as the client sends."""
    from parley.transport.head_timeout import MAX_HEAD_BYTES

    start = b"GET /healthz HTTP/1.1\r\nHost: test\r\nX-Filler: "
    end = b"\r\n\r\n"
    largest = start + b"a" * (MAX_HEAD_BYTES - len(start) - len(end)) + end
    served, served_writer = await _open(server, largest)
    assert (await _answer(served, 5.0))[0] == 200
    over, over_writer = await _open(server, largest[: -len(end)] + b"a" * (len(end) + 1))
    status, headers, body = await _answer(over, 5.0)
    assert status == 431 and headers["connection"] == "close" and b"exceeds" in body
    for writer in (served_writer, over_writer):
        writer.close()
