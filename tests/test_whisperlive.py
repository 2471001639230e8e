"""WhisperLive's wire on / (protocol.md section 10b), through WhisperLive's own client
(the ``whisper_live`` package's ``StreamingTranscriptionClient``, which connects to
ws://HOST:PORT with no path): options first, SERVER_READY, float32 audio, segment
lists with partials and completed finals, END_OF_AUDIO; and the options it refuses or
does not serve, answered as WhisperLive's server answers, by the client's uid."""

import asyncio
import json

import httpx
import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from test_compat import KEY

OPTIONS = {"uid": "u-1", "language": "en", "task": "transcribe", "model": "small"}


def whisperlive_stream(port: int, audio: np.ndarray, **options) -> tuple[list, list, list]:
    """Stream ``audio`` (float32, 16 kHz) in 0.1 s chunks, five times faster than real
    time, through WhisperLive's client; its committed segments, its partials' texts,
    and every message it received."""
    import time
    from unittest import mock

    from whisper_live.client import StreamingTranscriptionClient, _HookedClient

    committed: list[dict] = []
    partials: list[str] = []
    heard: list[dict] = []
    reading = _HookedClient.on_message

    def recording(self, ws, message):
        heard.append(json.loads(message))
        reading(self, ws, message)

    # Hooked on the class before the client exists: its constructor connects at once,
    # and SERVER_READY may come before an instance's hook could be put in place.
    with mock.patch.object(_HookedClient, "on_message", recording):
        client = StreamingTranscriptionClient(
            "127.0.0.1",
            port,
            lang="en",
            model="small",
            on_partial_transcript=lambda text, _: partials.append(text),
            on_committed_transcript=lambda _, segments: committed.extend(segments),
            **options,
        )
        with client:
            for start in range(0, len(audio), 1600):
                client.send_array(audio[start : start + 1600].astype(np.float32))
                time.sleep(0.02)
    return committed, partials, heard


async def test_whisperlives_client_gets_partials_then_every_final_as_completed_segments(
    start, talk
):
    """Its completed segments are the finals /v1/stream gives for the same audio: the
    same texts, timed as WhisperLive times them (seconds as strings, three decimals);
    partials come before; a stream it ends gets no DISCONNECT (that is for the server's
    own end), and the page is still at GET /."""
    audio, _ = talk
    _, server = await start()
    committed, partials, heard = await asyncio.to_thread(whisperlive_stream, server.port, audio)
    assert heard[0] == {
        "uid": heard[0]["uid"],
        "message": "SERVER_READY",
        "backend": "faster_whisper",
    }
    assert partials and len(committed) == 3, committed
    assert all(s["completed"] and s["text"].startswith("w") for s in committed)
    starts = [float(s["start"]) for s in committed]
    assert starts == sorted(starts) and all(s["end"] == f"{float(s['end']):.3f}" for s in committed)
    assert not any(m.get("message") == "DISCONNECT" for m in heard)
    async with connect(f"ws://127.0.0.1:{server.port}/v1/stream") as native:
        native_texts = []
        await native.recv()  # session_started
        for begin in range(0, len(audio), 1600):
            await native.send((audio[begin : begin + 1600] * 32767).astype("<i2").tobytes())
        await native.send(json.dumps({"type": "end_of_stream"}))
        async for message in native:
            data = json.loads(message)
            if data["type"] == "final" and data["text"]:
                native_texts.append(data["text"])
    assert [s["text"] for s in committed] == native_texts
    async with httpx.AsyncClient() as client:
        page = await client.get(f"http://127.0.0.1:{server.port}/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")


async def test_words_int16_audio_and_the_last_n_segments(start, talk):
    """``word_timestamps`` puts each final's words in its segment; ``audio_format``
    int16 is read as such; ``send_last_n_segments`` bounds each message's list."""
    audio, _ = talk
    _, server = await start()
    options = {
        **OPTIONS,
        "word_timestamps": True,
        "audio_format": "int16",
        "send_last_n_segments": 2,
    }
    async with connect(f"ws://127.0.0.1:{server.port}") as ws:
        await ws.send(json.dumps(options))
        assert json.loads(await ws.recv())["message"] == "SERVER_READY"
        for begin in range(0, len(audio), 1600):
            await ws.send((audio[begin : begin + 1600] * 32767).astype("<i2").tobytes())
        await ws.send(b"END_OF_AUDIO")
        lists = [json.loads(m)["segments"] async for m in ws]
    completed = [s for segments in lists for s in segments if s["completed"]]
    assert max(len([s for s in segments if s["completed"]]) for segments in lists) == 2
    last = lists[-1]
    assert len(last) == 2 and all(s["words"] for s in last), last
    for segment in last:
        words = segment["words"]
        assert " ".join(w["word"] for w in words) == segment["text"]
        assert float(segment["start"]) <= float(words[0]["start"])
        assert all(set(w) == {"word", "start", "end", "probability"} for w in words)
    assert len({s["start"] for s in completed}) == 3


@pytest.mark.parametrize(
    "first, status, says",
    [
        (b"\x00\x00\x80\x3f" * 400, "ERROR", "options"),  # audio before the options
        ("not json", "ERROR", "options"),
        (json.dumps({"language": "en"}), "ERROR", "uid"),
        (json.dumps({**OPTIONS, "audio_format": "uint8"}), "ERROR", "audio_format"),
        (json.dumps({**OPTIONS, "language": "xx-"}), "ERROR", "language"),
        (json.dumps({**OPTIONS, "send_last_n_segments": 0}), "ERROR", "send_last_n_segments"),
        (json.dumps({**OPTIONS, "task": "translate"}), "ERROR", "translate"),  # tiny.en-like
        (json.dumps({**OPTIONS, "enable_diarization": True}), "WARNING", "/v1/stream"),
        (json.dumps({**OPTIONS, "enable_translation": True}), "WARNING", "task=translate"),
    ],
)
async def test_options_it_cannot_take_are_answered_by_status(start, first, status, says):
    """What WhisperLive's server would refuse, or Parley does not serve, is a status
    message (ERROR: its client stops; WARNING: the stream goes on), with the client's
    uid where it gave one; the connection stays open."""
    _, server = await start()  # the fake engine is English-only, as tiny.en
    async with connect(f"ws://127.0.0.1:{server.port}/") as ws:
        await ws.send(first)
        replies = [json.loads(await ws.recv())]
        if status == "WARNING":
            replies.append(json.loads(await ws.recv()))
            assert replies[0]["message"] == "SERVER_READY"
        reply = replies[-1]
        assert reply["status"] == status and says in reply["message"], reply
        if isinstance(first, str) and '"uid"' in first:
            assert reply["uid"] == "u-1"
        await ws.send(b"END_OF_AUDIO")
        with pytest.raises(ConnectionClosed):
            while True:
                await ws.recv()
    assert ws.close_code == 1000


async def test_the_servers_end_is_a_disconnect_and_keys_hold(start, talk):
    """A stream the server ends (its longest session) is told DISCONNECT, as WhisperLive
    tells its overtime; a server with keys refuses WhisperLive's client, which offers
    none, with an ERROR, and admits a key given as Parley's own wires take it."""
    audio, _ = talk
    _, server = await start(server={"max_session_s": 1.0})
    async with connect(f"ws://127.0.0.1:{server.port}") as ws:
        await ws.send(json.dumps(OPTIONS))
        for begin in range(0, 3 * 16000, 1600):
            await ws.send(audio[begin : begin + 1600].astype(np.float32).tobytes())
        heard = []
        with pytest.raises(ConnectionClosed):
            while True:
                heard.append(json.loads(await ws.recv()))
    assert heard[-1] == {"uid": "u-1", "message": "DISCONNECT"} and ws.close_code == 4410
    _, keyed = await start(token=KEY)
    async with connect(f"ws://127.0.0.1:{keyed.port}") as ws:
        refusal = json.loads(await ws.recv())
    assert refusal["status"] == "ERROR" and ws.close_code == 4401, refusal
    async with connect(f"ws://127.0.0.1:{keyed.port}/?token={KEY}") as ws:
        await ws.send(json.dumps(OPTIONS))
        assert json.loads(await ws.recv())["message"] == "SERVER_READY"
