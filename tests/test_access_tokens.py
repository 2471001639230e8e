"""Access tokens (protocol.md section 17): minted with a key by Parley's own request and
by the vendors' SDKs (deepgram-sdk's grant, OpenAI's client secrets, AssemblyAI's
temporary token), then used where a key would be, on the fake engine over loopback;
and the token itself: signed by its key, expiring, unable to mint another, kept out of
the logs."""

from __future__ import annotations

import asyncio
import base64
import logging
import time

import httpx
import openai
import pytest
from deepgram import AsyncDeepgramClient
from deepgram.environment import DeepgramClientEnvironment
from openai import AsyncOpenAI

from conftest import assert_finals_are_their_audio, chunks_of, pcm16
from parley.client.stream import run_stream, stream_url
from parley.config import Settings
from parley.loading import access_of, redaction_of
from parley.logs import RedactSecrets
from parley.protocol.messages import StreamConfig
from parley.transport import access_tokens
from parley.transport.auth import ApiKeys
from test_assemblyai import aai_session
from test_compat import KEY, at_24k, socket_session, turns  # noqa: F401 (a fixture)

KEYS = ApiKeys.of({"app": "secret-one", "other": "secret-two", "odd": "pt_a.b"})


def test_a_token_stands_for_its_key_until_it_expires():
    token, expires_at = access_tokens.mint("app", b"secret-one", 60, now=1000.5)
    assert expires_at == 1060 and token.startswith(access_tokens.PREFIX)
    assert KEYS.identify(token, now=1059.9) == "app"
    assert KEYS.identify(token, now=1060) is None  # expired
    assert KEYS.identify_key(token) is None  # not a key: it cannot ask for a token


def test_a_token_not_signed_by_its_own_key_is_nobodys():
    forged, _ = access_tokens.mint("app", b"secret-two", 60, now=1000)  # another key's secret
    unknown, _ = access_tokens.mint("gone", b"secret-one", 60, now=1000)  # no such key
    token, _ = access_tokens.mint("app", b"secret-one", 60, now=1000)
    payload, signature = token.split(".")
    other, _ = access_tokens.mint("other", b"secret-one", 60, now=1000)
    swapped = other.split(".")[0] + "." + signature  # another name under app's signature
    for offered in (forged, unknown, swapped, payload, token + "x", "pt_!!.??", "pt_e30.AA"):
        assert KEYS.identify(offered, now=1000) is None, offered
    assert KEYS.identify("pt_a.b", now=1000) == "odd"  # a key that looks like a token is a key


def test_tokens_are_kept_out_of_the_logs():
    token, _ = access_tokens.mint("app", b"secret-one", 60, now=time.time())
    record = logging.LogRecord(
        "x", logging.INFO, __file__, 1, "GET /v3/ws?token=%s", (token,), None
    )
    settings = Settings(api_keys={"app": "secret-one"})
    secrets, patterns = redaction_of(access_of(settings), settings)  # what `parley serve` logs by
    RedactSecrets(secrets, patterns).filter(record)
    assert token not in record.getMessage() and "[redacted]" in record.getMessage()


@pytest.fixture
async def server(start):
    _, running = await start(token=KEY)
    return running


async def _native_token(port: int, credential: str, **body) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.post(
            f"http://127.0.0.1:{port}/v1/auth/token",
            json=body or None,
            headers={"Authorization": f"Bearer {credential}"},
        )


async def test_a_native_token_streams_and_uploads_then_expires(server, turns):  # noqa: F811
    audio, _ = turns
    answer = await _native_token(server.port, KEY, ttl_s=2)
    assert answer.status_code == 200, answer.text
    token = answer.json()["token"]
    assert answer.json()["expires_in"] == 2
    url = stream_url(f"ws://127.0.0.1:{server.port}/v1/stream", StreamConfig(), token)
    result = await run_stream(url, chunks_of(audio), 32000, fast=True)
    assert result.errors == [] and result.finals
    assert_finals_are_their_audio(result.finals, audio)
    async with httpx.AsyncClient() as client:
        listed = await client.get(
            f"http://127.0.0.1:{server.port}/v1/models",
            headers={"Authorization": f"Bearer {token}"},
        )
    assert listed.status_code == 200
    refused = await _native_token(server.port, token)  # a token cannot mint another
    assert refused.status_code == 401 and refused.json()["error"] == "unauthorized"
    await asyncio.sleep(2.1)
    late = await run_stream(url, chunks_of(audio[:16000]), 32000, fast=True)
    assert [e.code.value for e in late.errors] == ["unauthorized"]


@pytest.mark.parametrize("body", [{"ttl_s": 0}, {"ttl_s": 7201}, {"ttl_s": "60"}, {"ttl_s": True}])
async def test_a_token_asked_for_too_long_or_without_a_key_is_refused(server, body):
    assert (await _native_token(server.port, KEY, **body)).status_code == 400
    assert (await _native_token(server.port, "wrong")).status_code == 401
    async with httpx.AsyncClient() as client:
        nan = await client.post(
            f"http://127.0.0.1:{server.port}/v1/auth/token",
            content=b'{"ttl_s": NaN}',
            headers={"Authorization": f"Bearer {KEY}"},
        )
    assert nan.status_code == 400


async def test_deepgram_sdk_grant_then_live_with_the_access_token(server, turns):  # noqa: F811
    audio, _ = turns
    local = f"127.0.0.1:{server.port}"
    environment = DeepgramClientEnvironment(
        base=f"http://{local}", production=f"ws://{local}", agent="", agent_rest=""
    )
    keyed = AsyncDeepgramClient(api_key=KEY, environment=environment)
    grant = await keyed.auth.v1.tokens.grant(ttl_seconds=30)
    assert grant.expires_in == 30
    client = AsyncDeepgramClient(access_token=grant.access_token, environment=environment)
    query = {"model": "nova-3", "encoding": "linear16", "sample_rate": "16000"}
    async with client.listen.v1.connect(**query) as dg:
        messages = await socket_session(dg, audio, 0.0, dg.send_close_stream)
    results = [m for m in messages if type(m).__name__ == "ListenV1Results"]
    assert results and all(r.channel.alternatives[0].transcript for r in results)


async def test_openai_client_secret_opens_sessions_with_its_session(server, turns):  # noqa: F811
    """openai's client_secrets.create with a session (manual commits, a prompt): the
    secret, used as the key, opens a session already so configured (session.created
    says so; one commit makes one item of all the audio); a session Parley cannot serve
    is refused when the secret is asked for, in OpenAI's error shape."""
    audio, _ = turns
    keyed = AsyncOpenAI(api_key=KEY, base_url=f"http://127.0.0.1:{server.port}/v1")
    asked = {"transcription": {"language": "en", "prompt": "Okonkwo"}, "turn_detection": None}
    secret = await keyed.realtime.client_secrets.create(
        expires_after={"anchor": "created_at", "seconds": 120},
        session={"type": "transcription", "audio": {"input": asked}},
    )
    assert secret.value.startswith("pt_") and secret.expires_at - time.time() <= 121
    assert secret.session.type == "transcription"
    assert secret.session.audio.input.turn_detection is None
    client = AsyncOpenAI(api_key=secret.value, base_url=f"http://127.0.0.1:{server.port}/v1")
    events = []
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as rt:
        data = pcm16(at_24k(audio))
        for i in range(0, len(data), 4800):
            await rt.input_audio_buffer.append(audio=base64.b64encode(data[i : i + 4800]).decode())
        await rt.input_audio_buffer.commit()
        while not events or events[-1]["type"] != (
            "conversation.item.input_audio_transcription.completed"
        ):
            events.append((await asyncio.wait_for(rt.recv(), 30)).model_dump())
    assert events[0]["type"] == "session.created"
    created = events[0]["session"]["audio"]["input"]
    assert "turn_detection" in created and created["turn_detection"] is None
    assert created["transcription"]["prompt"] == "Okonkwo"
    kinds = [e["type"] for e in events]
    assert "input_audio_buffer.speech_started" not in kinds  # no server VAD: one item
    assert kinds.count("conversation.item.input_audio_transcription.completed") == 1
    with pytest.raises(openai.BadRequestError):
        await keyed.realtime.client_secrets.create(session={"type": "realtime"})


async def test_assemblyai_temporary_token_then_streaming_with_it(server, turns):  # noqa: F811
    """AssemblyAI's token request as its API takes it (its SDK's create_temporary_token
    only speaks https, so httpx here), then its SDK streams with the token."""
    audio, _ = turns
    async with httpx.AsyncClient() as client:
        answer = await client.get(
            f"http://127.0.0.1:{server.port}/v3/token",
            params={"expires_in_seconds": 60},
            headers={"Authorization": KEY},
        )
        missing = await client.get(
            f"http://127.0.0.1:{server.port}/v3/token", headers={"Authorization": KEY}
        )
    assert answer.status_code == 200 and answer.json()["expires_in_seconds"] == 60
    assert missing.status_code == 400 and "expires_in_seconds" in missing.json()["error"]
    events = await aai_session(server.port, audio, key=answer.json()["token"], pace_s=0)
    ends = [e for e in events if type(e).__name__ == "TurnEvent" and e.end_of_turn]
    assert ends and all(e.transcript for e in ends)


async def test_a_token_request_is_refused_before_its_body_and_its_body_is_bounded(
    server, monkeypatch
):
    """No key: 401 at once, however large a body it announces (none is read). With the
    key: a body over 16 KiB is 413, one that stops arriving 408."""
    from parley.transport import token_routes

    monkeypatch.setattr(token_routes, "BODY_TIMEOUT_S", 0.5)

    async def answer(key: str, body: bytes, length: int) -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(
            f"POST /v1/auth/token HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        status = (await asyncio.wait_for(reader.readline(), 5)).split()[1]
        writer.close()
        return int(status)

    assert await answer("wrong", b"", 100_000_000) == 401
    assert await answer(KEY, b" " * 20_000, 20_000) == 413
    assert await answer(KEY, b'{"ttl_s":', 100) == 408
