"""The compatible wires (/v1/listen as Deepgram's, /v1/realtime as OpenAI's) on loopback,
driven by the vendors' own SDKs where they can say it and by raw WebSocket clients for
what an SDK never sends. The fake engine decodes: every result must be exactly its own
audio's transcription (protocol.md sections 9 and 10)."""

import asyncio
import base64
import hashlib
import json

import pytest
import soxr
from deepgram import AsyncDeepgramClient
from deepgram.core.api_error import ApiError
from deepgram.environment import DeepgramClientEnvironment
from openai import AsyncOpenAI
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from audio_fixtures import conversation
from conftest import heard_between, pcm16, refused
from parley.protocol.messages import Final, FinalReason, Word
from parley.transport.deepgram import with_speakers
from test_webhooks import SECRET, Receiver

KEY = "s3cret"


def deepgram_client(port: int, key: str = KEY) -> AsyncDeepgramClient:
    local = f"127.0.0.1:{port}"
    return AsyncDeepgramClient(
        api_key=key,
        environment=DeepgramClientEnvironment(
            base=f"http://{local}", production=f"ws://{local}", agent="", agent_rest=""
        ),
    )


async def socket_session(socket, audio, pace_s: float, finish) -> list:
    """Stream ``audio`` through a deepgram-sdk socket client (100 ms messages, ``pace_s``
    apart), then ``await finish()``; every message the server sent, as the SDK's types."""
    data = pcm16(audio)

    async def receive():
        return [message async for message in socket]

    received = asyncio.create_task(receive())
    for i in range(0, len(data), 3200):
        await socket.send_media(data[i : i + 3200])
        await asyncio.sleep(pace_s)
    await finish()
    return await asyncio.wait_for(received, timeout=300)  # a failure, never a hang


async def listen_recording(port: int, audio, params: list[tuple[str, str]]) -> dict:
    """``audio`` as a WAV body to the pre-recorded /v1/listen with ``params``; the
    first channel's first alternative of its 200 answer."""
    import io
    import wave

    import httpx

    body = io.BytesIO()
    with wave.open(body, "wb") as out:
        out.setnchannels(1), out.setsampwidth(2), out.setframerate(16000)
        out.writeframes(pcm16(audio))
    async with httpx.AsyncClient(timeout=60) as client:
        answer = await client.post(
            f"http://127.0.0.1:{port}/v1/listen",
            params=params,
            content=body.getvalue(),
            headers={"Content-Type": "audio/wav"},
        )
    assert answer.status_code == 200, answer.text
    return answer.json()["results"]["channels"][0]["alternatives"][0]


async def deepgram_session(
    port: int, audio, *, pace_s: float = 0.0, finalize: bool = False, **query
) -> list:
    """Stream ``audio`` through the Deepgram SDK's live client, then (Finalize and)
    CloseStream; every message the server sent."""
    query = {"model": "nova-3", "encoding": "linear16", "sample_rate": "16000", **query}
    async with deepgram_client(port).listen.v1.connect(**query) as dg:

        async def finish():
            if finalize:
                await dg.send_finalize()
            await dg.send_close_stream()

        return await socket_session(dg, audio, pace_s, finish)


@pytest.fixture(scope="module")
def turns():
    """Two turns 1.6 s apart (1.2 s between the recordings), and the audio as the server
    will decode it."""
    from conftest import as_received

    audio, truth = conversation(
        [("en-us", "The cat sat on the mat."), ("en-us", "Good morning, everyone.")], gap_s=1.2
    )
    return as_received(audio), truth


# ---------------------------------------------------------------- Deepgram


async def test_deepgram_sdk_gets_speech_events_results_and_metadata(start, turns):
    """Per turn: SpeechStarted, then a final Results of exactly its audio (speech_final,
    timed words), no interims when not asked; UtteranceEnd after the pause; Metadata last,
    with the duration and sha256 of the audio sent."""
    audio, truth = turns
    url, server = await start(token=KEY)
    got = await deepgram_session(
        server.port, audio, vad_events="true", punctuate="true", utterance_end_ms="1000"
    )
    kinds = [m.type for m in got]
    assert kinds == ["SpeechStarted", "Results", "UtteranceEnd"] * 2 + ["Metadata"]
    results = [m for m in got if m.type == "Results"]
    for result, said in zip(results, truth):
        assert result.is_final and result.speech_final and not result.from_finalize
        assert result.channel_index == [0, 1]
        alternative = result.channel.alternatives[0]
        assert alternative.transcript == heard_between(
            audio, result.start, result.start + result.duration
        )
        words = alternative.words
        assert [w.punctuated_word for w in words] == alternative.transcript.split()
        assert said.start - 0.3 <= words[0].start and words[-1].end <= said.end + 0.3
        assert all(w.speaker is None for w in words)
        assert result.metadata.model_info.name == "fake"
    ends = [m for m in got if m.type == "UtteranceEnd"]
    assert [e.last_word_end for e in ends] == [
        r.channel.alternatives[0].words[-1].end for r in results
    ]
    metadata = got[-1]
    assert metadata.request_id == results[0].metadata.request_id
    assert metadata.duration == pytest.approx(len(audio) / 16000, abs=0.01)
    assert metadata.sha256 == hashlib.sha256(pcm16(audio)).hexdigest()


async def test_deepgram_interim_results_come_before_their_final(start, turns):
    """interim_results=true: each turn (longer than the 1 s partial interval, counted in
    stream time) has an interim Results, not final, with text and its decode's
    confidence, before its final; the fake engine decodes at once, so how busy the
    machine is changes nothing."""
    audio, _ = turns
    _, server = await start()
    got = await deepgram_session(server.port, audio, pace_s=0.1, interim_results="true")
    results = [m for m in got if m.type == "Results"]
    finals = [i for i, r in enumerate(results) if r.is_final]
    assert len(finals) == 2
    for first, final in zip([0, finals[0] + 1], finals):
        interims = results[first:final]
        assert interims and all(not r.is_final for r in interims)
        assert all(r.channel.alternatives[0].transcript for r in interims)
        assert interims[0].start == results[final].start
        # an interim's confidence is its decode's (the fake's decodes are sure of each token)
        assert all(r.channel.alternatives[0].confidence == 1.0 for r in interims)


async def test_deepgram_endpointing_is_the_pause_that_ends_a_final(start, turns):
    """The default ends a final at the 1.6 s pause; endpointing=2500 keeps both turns in one;
    endpointing=false still makes finals but never says speech_final."""
    audio, _ = turns
    _, server = await start()
    finals = {}
    for endpointing in (None, "2500", "false"):
        query = {"endpointing": endpointing} if endpointing else {}
        got = await deepgram_session(server.port, audio, **query)
        finals[endpointing] = [m for m in got if m.type == "Results"]
    assert len(finals[None]) == 2 and len(finals["2500"]) == 1
    assert [r.speech_final for r in finals["false"]] == [False, False]


async def test_deepgram_finalize_flushes_and_keepalive_and_bad_messages(start, turns):
    """Finalize mid-turn gives a final with from_finalize; KeepAlive gets nothing back; an
    unknown message gets an Error (SchemaError) and the stream goes on; CloseStream ends
    with Metadata and close 1000."""
    audio, truth = turns
    url, server = await start()
    middle = round((truth[0].start + truth[0].end) / 2 * 16000)
    async with connect(
        f"ws://127.0.0.1:{server.port}/v1/listen?encoding=linear16"
        "&sample_rate=16000&interim_results=false"
    ) as ws:
        await ws.send(pcm16(audio[:middle]))
        await ws.send(json.dumps({"type": "KeepAlive"}))
        await ws.send(json.dumps({"type": "Finalize"}))
        await ws.send('{"type": "Configure_typo"}')
        await ws.send(pcm16(audio[middle:]))
        await ws.send(json.dumps({"type": "CloseStream"}))
        got = [json.loads(m) async for m in ws]
    assert ws.close_code == 1000
    assert [m["type"] for m in got] == ["Results", "Error", "Results", "Results", "Metadata"]
    flushed = got[0]
    assert flushed["from_finalize"] and flushed["is_final"] and not flushed["speech_final"]
    assert flushed["start"] + flushed["duration"] == pytest.approx(middle / 16000, abs=0.001)
    assert got[1]["variant"] == "SchemaError" and "Configure_typo" in got[1]["description"]
    assert not got[2]["from_finalize"]


async def test_deepgram_multichannel_transcribes_each_channel_on_its_own(start, turns):
    """multichannel=true with two channels (a stereo call: one voice a side): each
    channel's Results are exactly its own audio's, with channel_index [i, 2], finals in
    the order they ended across channels; SpeechStarted and UtteranceEnd name their
    channel; Metadata says 2 channels, and the webhooks' finals their channel (track).
    Without multichannel the channels are mixed."""
    import numpy as np

    from conftest import as_received

    left, _ = turns
    other, _ = conversation([("en-us", "The train leaves from platform number nine.")], 2.0, 1.5)
    right = np.zeros_like(left)
    right[: min(len(left), len(other))] = as_received(other)[: len(left)]
    stereo = np.stack([left, right], axis=1)  # interleaved: left, right, left, …
    receiver = Receiver()
    async with receiver as hooks:
        _, server = await start(token=KEY, webhooks={"url": hooks, "secret": SECRET})
        got = await deepgram_session(
            server.port,
            stereo,
            channels="2",
            multichannel="true",
            vad_events="true",
            utterance_end_ms="1000",
        )
        while not any(e["type"] == "session.ended" for e in receiver.events):
            await asyncio.sleep(0.01)
        await server.stop()  # before the receiver: nothing left to deliver to it
    results = [m for m in got if m.type == "Results"]
    assert sorted(r.channel_index[0] for r in results) == [0, 0, 1]
    for result in results:
        index, count = result.channel_index
        heard = heard_between((left, right)[index], result.start, result.start + result.duration)
        assert count == 2 and result.channel.alternatives[0].transcript == heard
    ends = [r.start + r.duration for r in results]
    assert ends == sorted(ends)
    starts = [m.channel for m in got if m.type == "SpeechStarted"]
    assert sorted(c[0] for c in starts) == [0, 0, 1] and all(c[1] == 2 for c in starts)
    utterance_ends = {tuple(m.channel): m.last_word_end for m in got if m.type == "UtteranceEnd"}
    last = {r.channel_index[0]: r.channel.alternatives[0].words[-1].end for r in results}
    assert utterance_ends[(1, 2)] == last[1] and (0, 2) in utterance_ends
    assert got[-1].type == "Metadata" and got[-1].channels == 2
    # the webhooks' finals say the channel each is of
    hooked = [e["data"] for e in receiver.events if e["type"] == "transcript.final"]
    assert sorted(f["track"] for f in hooked if f["text"]) == ["0", "0", "1"]
    _, server = await start(token=KEY)
    mixed = await deepgram_session(server.port, stereo, channels="2")
    assert {tuple(m.channel_index) for m in mixed if m.type == "Results"} == {(0, 1)}


async def test_deepgram_refusals_are_http_errors_as_deepgram_gives_them(start):
    """A wrong key is HTTP 401 (the SDK's ApiError); settings Parley cannot honour are 400
    with Deepgram's error body; the browser's token subprotocol is a key too."""
    _, server = await start(token=KEY)
    with pytest.raises(ApiError) as caught:
        async with deepgram_client(server.port, "wrong").listen.v1.connect(
            model="nova-3", encoding="linear16", sample_rate="16000"
        ):
            pass
    assert caught.value.status_code == 401
    base = f"ws://127.0.0.1:{server.port}/v1/listen"
    for query, fragment in (
        ("sample_rate=16000", "containerised"),
        ("encoding=opus&sample_rate=16000", "not supported"),
        ("encoding=linear16", "sample_rate is required"),
        ("encoding=linear16&sample_rate=16000&diarize=true", "diarization is not available"),
        ("encoding=%E3%BD%A1&sample_rate=16000", "'㽡' is not supported"),  # not ASCII
    ):
        with pytest.raises(InvalidStatus) as refusal:
            async with connect(f"{base}?{query}", subprotocols=["token", KEY]):
                pass
        response = refusal.value.response
        body = json.loads(response.body)
        assert response.status_code == 400 and body["err_code"] == "BAD_CONFIG"
        assert fragment in body["err_msg"] and body["request_id"]
        assert response.headers["dg-error"].isascii()  # the message, in what a header holds
    async with connect(
        f"{base}?encoding=mulaw&sample_rate=8000", subprotocols=["token", KEY]
    ) as ws:
        assert ws.subprotocol == "token"
        await ws.send(bytes([0xFF]) * 800)
        await ws.send(json.dumps({"type": "CloseStream"}))
        assert json.loads(await ws.recv())["type"] == "Metadata"


# ---------------------------------------------------------------- OpenAI


def at_24k(audio):
    return soxr.resample(audio, 16000, 24000)


async def realtime_events(
    port: int, audio, session: dict, then=(), key: str = KEY, pace_s: float = 0.0
) -> list:
    """A transcription session through the openai SDK: update the session, append
    ``audio`` (at 24 kHz, 100 ms events, ``pace_s`` apart), then send ``then``; events
    until the first error (its end marker), as dicts."""
    client = AsyncOpenAI(api_key=key, base_url=f"http://127.0.0.1:{port}/v1")
    events = []
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as rt:
        await rt.session.update(session={"type": "transcription", **session})
        data = pcm16(at_24k(audio))
        for i in range(0, len(data), 4800):
            await rt.input_audio_buffer.append(audio=base64.b64encode(data[i : i + 4800]).decode())
            await asyncio.sleep(pace_s)
        for event in then:
            await rt.send(event)
        while not events or events[-1]["type"] != "error":
            event = await asyncio.wait_for(rt.recv(), 30)
            events.append(event.model_dump(exclude_none=True))
    return events


# A server VAD item's events, in order.
PER_ITEM = [
    "input_audio_buffer.speech_started",
    "input_audio_buffer.speech_stopped",
    "input_audio_buffer.committed",
    "conversation.item.input_audio_transcription.delta",
    "conversation.item.input_audio_transcription.completed",
]


async def test_openai_server_vad_makes_an_item_per_turn(start, turns):
    """With server VAD each turn is an item: speech_started, speech_stopped, committed,
    one delta of the final's whole text and completed, chained by previous_item_id."""
    audio, truth = turns
    _, server = await start(token=KEY)
    events = await realtime_events(
        server.port,
        audio,
        {
            "audio": {
                "input": {
                    "transcription": {"language": "en"},
                    "turn_detection": {"type": "server_vad", "silence_duration_ms": 500},
                }
            }
        },
        then=[{"type": "input_audio_buffer.commit"}],
    )
    kinds = [e["type"] for e in events]
    assert kinds == ["session.created", "session.updated", *PER_ITEM * 2, "error"]
    assert events[1]["session"]["audio"]["input"]["turn_detection"]["silence_duration_ms"] == 480
    assert events[-1]["error"]["code"] == "input_audio_buffer_commit_empty"
    items = [events[2 + 5 * k : 7 + 5 * k] for k in range(2)]
    previous = None
    for (started, stopped, committed, delta, completed), said in zip(items, truth):
        item = started["item_id"]
        assert {
            stopped["item_id"],
            committed["item_id"],
            delta["item_id"],
            completed["item_id"],
        } == {item}
        assert committed.get("previous_item_id") == previous
        previous = item
        assert started["audio_start_ms"] / 1000 <= said.start <= said.end
        assert said.end <= stopped["audio_end_ms"] / 1000
        heard = heard_between(
            audio, started["audio_start_ms"] / 1000, stopped["audio_end_ms"] / 1000
        )
        assert delta["delta"] == completed["transcript"] == heard


async def test_openai_semantic_vad_commits_an_item_once_its_text_reads_finished(start, turns):
    """semantic_vad: the session says so, with its eagerness (auto unless given); an item
    whose text gives no sign of going on (the fake's, unpunctuated) is committed when its
    final is read, so each turn is still an item, its events in server VAD's order (a real
    voice broken off mid-sentence: test_compat_sdks); an eagerness OpenAI has not is
    bad_config."""
    audio, truth = turns
    _, server = await start(token=KEY)
    semantic = {"audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}}
    events = await realtime_events(
        server.port, audio, semantic, then=[{"type": "input_audio_buffer.commit"}]
    )
    told = events[1]["session"]["audio"]["input"]["turn_detection"]
    assert told == {"type": "semantic_vad", "eagerness": "auto"}
    assert [e["type"] for e in events[2:]] == [*PER_ITEM * len(truth), "error"]
    eager = {"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "x"}}}}
    refused = await realtime_events(server.port, audio[:1600], eager)
    assert refused[-1]["error"]["code"] == "bad_config"


async def test_openai_semantic_vad_holds_an_item_until_the_client_commits_or_clears(start, turns):
    """eagerness low asks for more than the fake's unpunctuated text reads (0.75 < 0.8):
    both turns are held as one item (one speech_started), which the client's commit
    commits whole, each turn's text a delta; a clear instead drops the held item (no
    transcript), and the next commit finds the buffer empty."""
    audio, truth = turns
    _, server = await start(token=KEY)
    low = {"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "low"}}}}
    commit, clear = {"type": "input_audio_buffer.commit"}, {"type": "input_audio_buffer.clear"}
    events = await realtime_events(server.port, audio, low, then=[commit, commit])
    kinds = [e["type"] for e in events[2:]]
    assert kinds == [
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        *["conversation.item.input_audio_transcription.delta"] * len(truth),
        "conversation.item.input_audio_transcription.completed",
        "error",
    ], kinds
    (done,) = [e for e in events if e["type"].endswith("transcription.completed")]
    assert done["transcript"] == " ".join(
        heard_between(audio, said.start - 0.3, said.end + 0.3) for said in truth
    )
    cleared = await realtime_events(server.port, audio, low, then=[clear, commit])
    kinds = [e["type"] for e in cleared[2:]]
    assert "input_audio_buffer.cleared" in kinds and not any("transcription" in k for k in kinds)
    assert cleared[-1]["error"]["code"] == "input_audio_buffer_commit_empty"


async def test_openai_completed_items_carry_logprobs_when_included(start, turns):
    """include: the words' log probabilities on each completed item (none without it),
    their tokens making its transcript; the session object says what it includes."""
    audio, _ = turns
    _, server = await start(token=KEY)
    vad = {"type": "server_vad", "silence_duration_ms": 500}
    asked = "item.input_audio_transcription.logprobs"
    for include in ([asked], None):
        events = await realtime_events(
            server.port,
            audio,
            {"audio": {"input": {"turn_detection": vad}}, "include": include},
            then=[{"type": "input_audio_buffer.commit"}],
        )
        assert events[1]["session"].get("include") == include
        done = [e for e in events if e["type"].endswith("transcription.completed")]
        assert len(done) == 2
        for completed in done:
            if include is None:
                assert "logprobs" not in completed
                continue
            tokens = [p["token"] for p in completed["logprobs"]]
            assert "".join(tokens) == completed["transcript"]
            assert all(p["logprob"] <= 0 for p in completed["logprobs"])


async def test_openai_manual_commits_clear_and_the_older_session_form(start, turns):
    """turn_detection null (here in transcription_session.update's older form, in G.711
    mu-law): no speech events; clear drops what was appended; commit makes one item of
    everything appended since; an empty commit is OpenAI's error."""
    audio, truth = turns
    _, server = await start()
    split = round((truth[0].end + truth[1].start) / 2 * 16000)
    first, second = (g711_mulaw(part) for part in (audio[:split], audio[split:]))
    client = AsyncOpenAI(api_key="none", base_url=f"http://127.0.0.1:{server.port}/v1")
    events = []
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as rt:
        await rt.send(
            {
                "type": "transcription_session.update",
                "session": {"input_audio_format": "g711_ulaw", "turn_detection": None},
            }
        )
        await rt.input_audio_buffer.append(audio=base64.b64encode(first).decode())
        await rt.input_audio_buffer.clear()
        await rt.send(
            {"type": "transcription_session.update", "session": {"input_audio_format": "pcm16"}}
        )  # too late: refused
        await rt.input_audio_buffer.append(audio=base64.b64encode(second).decode())
        await rt.input_audio_buffer.commit()
        await rt.input_audio_buffer.commit()
        while len([e for e in events if e["type"] == "error"]) < 2:
            events.append((await asyncio.wait_for(rt.recv(), 30)).model_dump(exclude_none=True))
    kinds = [e["type"] for e in events]
    assert kinds == [
        "session.created",
        "transcription_session.updated",
        "input_audio_buffer.cleared",
        "error",
        "input_audio_buffer.committed",
        "conversation.item.input_audio_transcription.delta",
        "conversation.item.input_audio_transcription.completed",
        "error",
    ]
    settings = events[1]["session"]["audio"]["input"]
    assert settings["format"]["type"] == "audio/pcmu" and settings.get("turn_detection") is None
    assert "cannot change once audio" in events[3]["error"]["message"]
    assert events[-1]["error"]["code"] == "input_audio_buffer_commit_empty"
    transcript = events[6]["transcript"]
    assert transcript and transcript == events[5]["delta"]
    said = heard_between(audio[split:], 0, 99).split()
    assert abs(len(transcript.split()) - len(said)) <= 1  # the second turn only, resampled


def g711_mulaw(audio) -> bytes:
    """16 kHz audio as a telephone sends it: 8 kHz G.711 mu-law (by the formula)."""
    import numpy as np

    narrow = np.clip(soxr.resample(audio, 16000, 8000), -1, 1)
    magnitude = np.log1p(255 * np.abs(narrow)) / np.log1p(255)
    codes = np.round(np.sign(narrow) * magnitude * 127).astype(int)
    return np.where(codes >= 0, 0xFF - codes, 0x7F + codes).astype(np.uint8).tobytes()


async def test_openai_refusals_and_bad_events(start):
    """No intent, or a wrong key: an error event, then the native close code; binary
    messages, bad base64 and unsupported events get error events and the session goes on."""
    url, server = await start(token=KEY)
    base = f"ws://127.0.0.1:{server.port}/v1/realtime"
    bearer = {"Authorization": f"Bearer {KEY}"}
    message, code = await refused(base, additional_headers=bearer)
    assert (message["type"], message["error"]["code"], code) == ("error", "bad_config", 4400)
    message, code = await refused(
        f"{base}?intent=transcription", additional_headers={"Authorization": "Bearer wrong"}
    )
    assert (message["error"]["code"], code) == ("unauthorized", 4401)
    async with connect(
        f"{base}?intent=transcription", subprotocols=["realtime", f"openai-insecure-api-key.{KEY}"]
    ) as ws:
        assert ws.subprotocol == "realtime"
        assert json.loads(await ws.recv())["type"] == "session.created"
        await ws.send(bytes(480))
        await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": "%%%"}))
        await ws.send(json.dumps({"type": "response.create", "event_id": "evt_7"}))
        await ws.send(
            json.dumps(
                {
                    "type": "input_audio_buffer.append",
                    "audio": base64.b64encode(bytes(4800)).decode(),
                }
            )
        )
        await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        errors = [json.loads(await ws.recv())["error"] for _ in range(4)]
    assert [e["code"] for e in errors] == [
        "bad_message",
        "bad_audio",
        "bad_message",
        "input_audio_buffer_commit_empty",
    ]
    assert [e.get("event_id") for e in errors[:3]] == [None, None, "evt_7"]


async def test_a_compatible_session_is_drained_like_a_native_one(start, turns):
    """On a drain, a Deepgram session gets the finals of all the audio it sent (here cut
    in the middle of the second turn), Metadata, then close 1001, as a native one would."""
    audio, truth = turns
    _, server = await start()
    cut = round((truth[1].start + truth[1].end) / 2 * 16000)
    listen = f"ws://127.0.0.1:{server.port}/v1/listen?encoding=linear16&sample_rate=16000"
    async with connect(listen) as ws:
        await ws.send(pcm16(audio[:cut]))
        got = [json.loads(await ws.recv())]  # so the server has read all the audio
        draining = asyncio.create_task(server.drain(timeout_s=30))
        got += [json.loads(m) async for m in ws]
        await draining
    assert ws.close_code == 1001
    assert [m["type"] for m in got] == ["Results", "Results", "Metadata"]
    last = got[1]
    assert last["start"] + last["duration"] == pytest.approx(cut / 16000, abs=0.001)
    assert last["channel"]["alternatives"][0]["words"]


async def test_openai_commits_at_the_end_of_speech_not_after_the_decode(start, turns):
    """speech_stopped and committed come when the VAD closes the segment, while its
    decode is still held back (here by the engine itself); delta and completed follow
    once the decode is done."""
    import threading

    from fake_engine import FakeEngine

    audio, truth = turns
    release = threading.Event()
    engine = FakeEngine(fail=lambda request: not release.wait(30))  # holds every decode
    _, server = await start(engine)
    client = AsyncOpenAI(api_key="none", base_url=f"http://127.0.0.1:{server.port}/v1")
    first_turn = audio[: int((truth[0].end + 1.0) * 16000)]  # then 1 s of silence
    seen = []
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as rt:
        data = pcm16(at_24k(first_turn))
        await rt.input_audio_buffer.append(audio=base64.b64encode(data).decode())
        while not seen or seen[-1] != "input_audio_buffer.committed":
            seen.append((await asyncio.wait_for(rt.recv(), 30)).type)
        release.set()  # only now may the decode finish
        while seen[-1] != "conversation.item.input_audio_transcription.completed":
            seen.append((await asyncio.wait_for(rt.recv(), 30)).type)
    assert seen == [
        "session.created",
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "conversation.item.input_audio_transcription.delta",
        "conversation.item.input_audio_transcription.completed",
    ]


@pytest.mark.parametrize(
    ("query", "language"),
    [
        ({"language": "en-US"}, "en"),
        ({"language": "de"}, "de"),
        ({"language": "multi"}, None),
        ({}, None),
        ({"language": "en", "detect_language": "true"}, None),
    ],
)
def test_a_recordings_language_is_read_as_on_the_live_wire(query, language):
    from parley.transport.deepgram_query import recording_language

    assert recording_language(query) == language


def test_a_recordings_malformed_language_is_refused():
    from parley.protocol.messages import ProtocolError
    from parley.transport.deepgram_query import recording_language

    with pytest.raises(ProtocolError):
        recording_language({"language": "english please"})


@pytest.mark.parametrize(
    "values, categories",
    [
        (["pci", "ssn"], ("pci", "ssn")),
        (["credit_card", "phone_number"], ("pci", "phone")),
        (["pii"], ("pci", "ssn", "phone")),
        (["numbers"], ("numbers",)),
        (["aggressive_numbers"], ("numbers",)),  # what LiveKit's Flux plugin sends
        (["true"], ("numbers",)),  # Deepgram: "numbers (or true)"
        (["false"], ()),
    ],
)
def test_deepgrams_redact_values_become_parleys_categories(values, categories):
    from starlette.datastructures import QueryParams

    from parley.transport.deepgram_query import ListenVocabulary

    query = QueryParams([("redact", v) for v in values])
    assert ListenVocabulary.of(query).redact == categories


def test_deepgrams_filler_words_reaches_the_stream_and_is_off_by_default():
    from starlette.datastructures import QueryParams

    from parley.protocol.stream_config import StreamConfig
    from parley.transport.deepgram_query import ListenVocabulary

    asked = ListenVocabulary.of(QueryParams([("filler_words", "true")]))
    assert asked.filler_words and StreamConfig.from_query(asked.query()).filler_words
    assert "filler_words" not in ListenVocabulary.of(QueryParams([])).query()


def test_an_unknown_redact_value_is_refused():
    from starlette.datastructures import QueryParams

    from parley.protocol.messages import ErrorCode, ProtocolError
    from parley.transport.deepgram_query import ListenVocabulary

    with pytest.raises(ProtocolError) as refused:
        ListenVocabulary.of(QueryParams([("redact", "phi")]))
    assert refused.value.code == ErrorCode.BAD_CONFIG


def test_deepgrams_repeated_search_replace_and_extra_are_read_and_bounded():
    from starlette.datastructures import QueryParams

    from parley.protocol.messages import ErrorCode, ProtocolError
    from parley.transport.deepgram_query import ListenVocabulary, listen_extra, listen_searches

    query = QueryParams([("search", "before noon"), ("search", "restart"), ("replace", "a:b")])
    assert listen_searches(query) == ("before noon", "restart")
    assert ListenVocabulary.of(query).replace == ("a:b",)
    assert listen_extra(QueryParams([("extra", "call:42"), ("extra", "url:http://x")])) == (
        ("call", "42"),
        ("url", "http://x"),
    )
    for bad in [[("search", "x" * 101)], [("replace", "a:b,c")], [("extra", "nokey")]]:
        with pytest.raises(ProtocolError) as refused:
            listen_searches(QueryParams(bad))
            listen_extra(QueryParams(bad))
            ListenVocabulary.of(QueryParams(bad)).query()
        assert refused.value.code == ErrorCode.BAD_CONFIG


def test_endpointing_becomes_the_vads_turn_silence_in_whole_frames():
    from parley.core.vad import VadConfig
    from parley.transport.deepgram_query import endpointing_vad
    from parley.transport.dialect import MIN_TURN_SILENCE_MS

    base = VadConfig()
    assert endpointing_vad({}, base) is None
    assert endpointing_vad({"endpointing": "false"}, base) is None
    assert endpointing_vad({"endpointing": "10"}, base).min_silence_ms == MIN_TURN_SILENCE_MS
    long = endpointing_vad({"endpointing": "1000"}, base)
    assert long.min_silence_ms % base.frame_ms == 0 and 990 <= long.min_silence_ms <= 1000
    assert long.speech_pad_ms <= long.min_silence_ms


def test_every_word_of_a_diarized_deepgram_result_has_a_speaker():
    """A word no speaker window heard yet (a short turn under load: the LiveKit plugin
    then showed a speaker_id None) takes its final's speaker, else the channel's last;
    Deepgram cannot revise a result, so nothing later would have told it. Without any
    speaker known (diarization off), the words stay as they are."""
    words = [Word("Of", 1.0, 1.2, 0.9, None), Word("course.", 1.2, 1.6, 0.9, "S2")]
    final = Final(3, 1.0, 1.6, "Of course.", FinalReason.SILENCE, words, "S2")
    assert [w.speaker for w in with_speakers(final, "S1")] == ["S2", "S2"]
    unheard = Final(4, 2.0, 2.4, "Yes.", FinalReason.SILENCE, [Word("Yes.", 2.0, 2.4, 0.9)])
    assert [w.speaker for w in with_speakers(unheard, "S1")] == ["S1"]
    assert [w.speaker for w in with_speakers(unheard, None)] == [None]
