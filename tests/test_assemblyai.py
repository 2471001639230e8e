"""/v3/ws as AssemblyAI's Universal-Streaming v3, driven by the assemblyai package's own
streaming client on loopback, the fake engine decoding: each turn's messages carry its
own audio's words, final ones marked, and end with end_of_turn (protocol.md 10a)."""

import asyncio
import json

from assemblyai.streaming.v3 import (
    AsyncStreamingClient,
    RealTimeEvents,
    RealTimeParameters,
    RealTimeTranscriberOptions,
)
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from conftest import heard_between, pcm16
from parley.protocol.messages import Final, FinalReason, SpeakerUpdate, Word
from parley.transport.speaker_revision import RevisedTurns, most_heard
from test_compat import KEY, turns  # noqa: F401 (turns: a fixture)


async def aai_session(
    port: int, audio, key: str = KEY, force: bool = False, pace_s: float = 0.1, **params
) -> list:
    """Stream ``audio`` through the assemblyai package's async client (100 ms chunks,
    ``pace_s`` apart), optionally ForceEndpoint, then Terminate; every event it
    dispatched."""
    events: list = []
    options = RealTimeTranscriberOptions(
        api_key=key,
        api_host=f"ws://127.0.0.1:{port}",
        # a loaded machine's server may answer or finish slower than the SDK's defaults
        # (1 s, 5 s) wait: a failure, never a stream cut short
        connect_timeout=30,
        terminate_timeout=120,
    )
    client = AsyncStreamingClient(options)
    kinds = (
        RealTimeEvents.Begin,
        RealTimeEvents.Turn,
        RealTimeEvents.SpeakerRevision,
        RealTimeEvents.Termination,
    )
    for kind in kinds:
        client.on(kind, lambda _, event: events.append(event))
    client.on(RealTimeEvents.Error, lambda _, error: events.append(error))
    await client.connect(RealTimeParameters(sample_rate=16000, **params))
    data = pcm16(audio)
    for i in range(0, len(data), 3200):
        await client.stream(data[i : i + 3200])
        await asyncio.sleep(pace_s)
    if force:
        await client.force_endpoint()
        await asyncio.sleep(0.5)
    await client.disconnect(terminate=True)
    return events


async def test_each_turn_grows_then_ends_with_its_own_words(start, turns):  # noqa: F811
    """Begin first; per turn, Turn messages with growing words, the final ones marked,
    then one end_of_turn whose transcript is exactly its audio's (Parley's decode,
    unformatted) and, with format_turns, a formatted one; turn_order counts turns;
    Termination last."""
    audio, truth = turns
    _, server = await start(token=KEY)
    events = await aai_session(server.port, audio, format_turns=True)
    assert type(events[0]).__name__ == "BeginEvent" and events[0].id
    assert type(events[-1]).__name__ == "TerminationEvent"
    turn_events = [e for e in events if type(e).__name__ == "TurnEvent"]
    ends = [e for e in turn_events if e.end_of_turn and not e.turn_is_formatted]
    formatted = [e for e in turn_events if e.turn_is_formatted]
    assert [e.turn_order for e in ends] == [0, 1] == [e.turn_order for e in formatted]
    for end, said in zip(ends, truth):
        assert all(w.word_is_final for w in end.words)
        assert end.transcript == " ".join(w.text for w in end.words)
        first, last = end.words[0].start / 1000, end.words[-1].end / 1000
        assert said.start - 0.3 <= first and last <= said.end + 0.3
        assert end.transcript == heard_between(audio, first - 0.3, last + 0.3)
        assert end.end_of_turn_confidence == 1.0
    for turn in (0, 1):
        growing = [e for e in turn_events if e.turn_order == turn and not e.end_of_turn]
        partial = [w for e in growing for w in e.words if not w.word_is_final]
        # a partial's words carry its decode's confidence (the fake's decodes are sure)
        assert partial and all(w.confidence == 1.0 for w in partial)


async def test_force_endpoint_and_refusals(start, turns):  # noqa: F811
    """ForceEndpoint ends the open turn at once; a wrong key is refused at the
    handshake with 401; a missing sample rate, an encoding not served, speakers asked
    of a server without diarization, or turn settings out of range with 400;
    UpdateConfiguration with keyterms_prompt and turn settings is taken, one with a bad
    setting and a bad message each get an Error, and the session goes on."""
    audio, truth = turns
    _, server = await start(token=KEY)
    cut = round((truth[0].end - 0.2) * 16000)  # mid-sentence: only the force ends it
    events = await aai_session(server.port, audio[:cut], force=True)
    ends = [e for e in events if type(e).__name__ == "TurnEvent" and e.end_of_turn]
    assert len(ends) == 1 and ends[0].transcript
    base = f"ws://127.0.0.1:{server.port}/v3/ws"
    for url, headers, status in (
        (f"{base}?sample_rate=16000", {"Authorization": "wrong"}, 401),
        (base, {"Authorization": KEY}, 400),
        (f"{base}?sample_rate=16000&encoding=opus", {"Authorization": KEY}, 400),
        (f"{base}?sample_rate=16000&speaker_labels=true", {"Authorization": KEY}, 400),
        (
            f"{base}?sample_rate=16000&end_of_turn_confidence_threshold=2",
            {"Authorization": KEY},
            400,
        ),
        (f"{base}?sample_rate=16000&max_turn_silence=1.5", {"Authorization": KEY}, 400),
    ):
        try:
            async with connect(url, additional_headers=headers):
                raise AssertionError("admitted")
        except InvalidStatus as refused:
            assert refused.response.status_code == status
    async with connect(
        f"{base}?sample_rate=16000", additional_headers={"Authorization": KEY}
    ) as ws:
        assert json.loads(await ws.recv())["type"] == "Begin"
        update = {
            "type": "UpdateConfiguration",
            "keyterms_prompt": ["Okonkwo"],
            "end_of_turn_confidence_threshold": 0.6,
            "max_turn_silence": 2000,
        }
        await ws.send(json.dumps(update))
        await ws.send(json.dumps({"type": "UpdateConfiguration", "max_turn_silence": -1}))
        assert "max_turn_silence" in json.loads(await ws.recv())["error"]
        await ws.send(json.dumps({"type": "Nonsense"}))
        assert json.loads(await ws.recv())["type"] == "Error"
        await ws.send(json.dumps({"type": "Terminate"}))
        assert json.loads(await ws.recv())["type"] == "Termination"


def _final(segment_id: int, speakers: list[str]) -> Final:
    words = [
        Word(f"w{segment_id}{k}", segment_id + k / 10, segment_id + (k + 1) / 10, 0.9, s)
        for k, s in enumerate(speakers)
    ]
    return Final(segment_id, words[0].start, words[-1].end, "text", FinalReason.SILENCE, words)


def test_speaker_updates_revise_the_turns_of_their_finals_once_with_all_their_words():
    """Finals 1 and 2 in turn 0, final 3 in turn 1. Updates of finals 2 and 3 revise
    turns 0 and 1 (in the order revised), each with all its words as they now stand;
    an update that moves no speaker, or of a final no turn holds, revises nothing; what
    was taken is not taken again."""
    sent = RevisedTurns()
    sent.heard(0, _final(1, ["S1"]))
    sent.heard(0, _final(2, ["S1", "S2"]))
    sent.heard(1, _final(3, ["S2"]))
    assert sent.revise(SpeakerUpdate(3, "S3", _final(3, ["S3"]).words)) == 1
    assert sent.revise(SpeakerUpdate(2, "S2", _final(2, ["S2", "S2"]).words)) == 0
    assert sent.revise(SpeakerUpdate(1, "S1", _final(1, ["S1"]).words)) is None
    assert sent.revise(SpeakerUpdate(9, "S1", _final(9, ["S1"]).words)) is None
    assert sent.take() == [1, 0] and sent.take() == []
    assert [w.speaker for w in sent.words(0)] == ["S1", "S2", "S2"]
    assert [w.word for w in sent.words(0)] == ["w10", "w20", "w21"]
    assert most_heard(sent.words(0)) == "S2" and most_heard(sent.words(1)) == "S3"
    assert most_heard([]) is None


async def test_the_prompt_is_the_decoders_prompt(start, turns):  # noqa: F811
    """AssemblyAI's ``prompt`` reaches the decoder as Whisper's prompt of every segment;
    one over 1000 characters is refused at the handshake with 400."""
    from fake_engine import FakeEngine

    audio, _ = turns
    engine = FakeEngine()
    _, server = await start(engine, token=KEY)
    prompt = "Okonkwo and Siobhan discuss the Kubernetes rollout"
    events = await aai_session(server.port, audio, pace_s=0, prompt=prompt)
    assert [e for e in events if type(e).__name__ == "TurnEvent" and e.end_of_turn]
    said = engine.prompt_tokens(prompt)
    assert engine.contexts and all(c[: len(said)] == said for c in engine.contexts)
    try:
        async with connect(
            f"ws://127.0.0.1:{server.port}/v3/ws?sample_rate=16000&prompt={'a' * 1001}",
            additional_headers={"Authorization": KEY},
        ):
            raise AssertionError("admitted")
    except InvalidStatus as refused:
        assert refused.response.status_code == 400
