"""/v2/listen as Deepgram Flux's, driven by deepgram-sdk's own v2 client on loopback,
the fake engine decoding: every turn's events follow Flux's state machine and carry
exactly its own audio's transcription (protocol.md section 9a)."""

import json

import pytest
from deepgram.core.api_error import ApiError
from websockets.asyncio.client import connect

from conftest import heard_between
from test_compat import KEY, deepgram_client, socket_session, turns  # noqa: F401 (turns: a fixture)


async def flux_session(
    port: int, audio, *, pace_s: float = 0.0, force_end: bool = False, configure=None, **query
):
    """Stream ``audio`` through deepgram-sdk's Flux client (100 ms messages, ``pace_s``
    apart), optionally Configure first and ForceEndTurn at the end, then CloseStream;
    every message the server sent, as the SDK's types."""
    query = {"model": "flux-general-en", "encoding": "linear16", "sample_rate": "16000", **query}
    async with deepgram_client(port).listen.v2.connect(**query) as flux:
        if configure is not None:
            await flux.send_configure(configure)

        async def finish():
            if force_end:
                await flux.send_force_end_turn()
            await flux.send_close_stream()

        return await socket_session(flux, audio, pace_s, finish)


def _turn_events(got) -> list[tuple[int, str]]:
    return [(m.turn_index, m.event) for m in got if m.type == "TurnInfo" and m.event != "Update"]


async def test_each_turn_starts_updates_and_ends_with_its_own_words(start, turns):  # noqa: F811
    """Connected first; per turn StartOfTurn, then EndOfTurn (trigger model) whose
    transcript is exactly its audio's, timed words inside it, Updates between, about one
    for each 0.25 s of its audio as Flux sends them, some with text (each turn is longer
    than the 1 s partial interval, in stream time); turn_index counts turns; sequence_id
    counts every message from 0."""
    audio, truth = turns
    _, server = await start(token=KEY)
    got = await flux_session(server.port, audio, pace_s=0.1)
    assert got[0].type == "Connected"
    assert [m.sequence_id for m in got] == list(range(len(got)))
    assert _turn_events(got) == [(0, "StartOfTurn"), (0, "EndOfTurn"), (1, "StartOfTurn")] + [
        (1, "EndOfTurn")
    ]
    ends = [m for m in got if m.type == "TurnInfo" and m.event == "EndOfTurn"]
    for end, said in zip(ends, truth):
        assert end.trigger == "model" and end.end_of_turn_confidence == 1.0
        assert end.transcript == heard_between(audio, end.audio_window_start, end.audio_window_end)
        assert [w.word for w in end.words] == end.transcript.split()
        assert said.start - 0.3 <= end.words[0].start and end.words[-1].end <= said.end + 0.3
    for turn, end in zip((0, 1), ends):
        updates = [
            m for m in got if m.type == "TurnInfo" and (m.turn_index, m.event) == (turn, "Update")
        ]
        assert any(u.transcript for u in updates)
        # a partial's words (untimed) carry its decode's confidence: the fake's are sure
        partial = [w for u in updates for w in u.words if w.start is None]
        assert partial and all(w.confidence == 1.0 for w in partial)
        # about one for each 0.25 s of the turn's audio (ticks of 100 ms messages: 0.3 s)
        heard_s = end.audio_window_end - end.audio_window_start
        assert len(updates) >= heard_s / 0.35 - 1, (heard_s, len(updates))


async def test_eager_mode_and_a_turn_left_to_the_client(start, turns):  # noqa: F811
    """eager_eot_threshold: each turn's EagerEndOfTurn comes before its EndOfTurn with the
    same transcript (or a TurnResumed and a new eager end between them). eot_threshold=1
    leaves the ending to the client: the two turns are one, ended by ForceEndTurn
    (trigger manual)."""
    audio, truth = turns
    _, server = await start(token=KEY)
    eager = await flux_session(server.port, audio, pace_s=0.1, eager_eot_threshold="0.5")
    events = _turn_events(eager)
    for turn in (0, 1):
        mine = [e for i, e in events if i == turn]
        assert mine[0] == "StartOfTurn" and mine[-1] == "EndOfTurn"
        assert mine[-2] == "EagerEndOfTurn", mine
    infos = [m for m in eager if m.type == "TurnInfo"]
    for i, info in enumerate(infos):
        if info.event == "EndOfTurn":
            assert infos[i - 1].event == "EagerEndOfTurn"
            assert infos[i - 1].transcript == info.transcript
    manual = await flux_session(server.port, audio, force_end=True, eot_threshold="1.0")
    assert _turn_events(manual) == [(0, "StartOfTurn"), (0, "EndOfTurn")]
    end = next(m for m in manual if m.type == "TurnInfo" and m.event == "EndOfTurn")
    assert end.trigger == "manual"
    assert end.transcript == " ".join(
        heard_between(audio, said.start - 0.3, said.end + 0.3) for said in truth
    )


async def test_configure_and_bad_settings(start, turns):  # noqa: F811
    """Configure answers ConfigureSuccess with the thresholds now in force, or
    ConfigureFailure for one out of Flux's range (the session goes on); flux-general-multi's
    turns say the languages detected; a bad query is refused at the handshake with 400, a
    bad key with 401, as Flux refuses them."""
    audio, _ = turns
    url, server = await start(token=KEY)
    got = await flux_session(
        server.port,
        audio[: 16000 * 2],
        configure={"type": "Configure", "thresholds": {"eot_threshold": 0.8}},
    )
    success = next(m for m in got if m.type == "ConfigureSuccess")
    assert success.thresholds.eot_threshold == 0.8
    ends = [m for m in got if m.type == "TurnInfo" and m.event == "EndOfTurn"]
    assert ends and all(end.languages is None for end in ends)  # flux-general-en's
    multi = await flux_session(server.port, audio[: 16000 * 2], model="flux-general-multi")
    ends = [m for m in multi if m.type == "TurnInfo" and m.event == "EndOfTurn"]
    assert ends and all(end.languages == ["en"] for end in ends)  # what was detected
    base = f"ws://127.0.0.1:{server.port}/v2/listen?model=flux-general-en&encoding=linear16"
    async with connect(
        f"{base}&sample_rate=16000", additional_headers={"Authorization": f"Token {KEY}"}
    ) as ws:
        assert json.loads(await ws.recv())["type"] == "Connected"
        await ws.send(json.dumps({"type": "Configure", "thresholds": {"eot_threshold": 2}}))
        failure = json.loads(await ws.recv())
        assert failure["type"] == "ConfigureFailure" and "eot_threshold" in failure["description"]
        await ws.send(json.dumps({"type": "CloseStream"}))
    with pytest.raises(ApiError) as refused:
        async with deepgram_client(server.port).listen.v2.connect(
            model="flux-general-en", encoding="linear16", sample_rate="16000", eot_threshold="3"
        ):
            pass
    assert refused.value.status_code == 400
    with pytest.raises(ApiError) as eager_after_end:
        async with deepgram_client(server.port).listen.v2.connect(
            model="flux-general-en",
            encoding="linear16",
            sample_rate="16000",
            eot_threshold="0.6",
            eager_eot_threshold="0.8",
        ):
            pass
    assert eager_after_end.value.status_code == 400
    with pytest.raises(ApiError) as unauthorised:
        async with deepgram_client(server.port, key="wrong").listen.v2.connect(
            model="flux-general-en", encoding="linear16", sample_rate="16000"
        ):
            pass
    assert unauthorised.value.status_code == 401


async def test_speech_that_starts_again_before_the_final_goes_on_with_the_turn(start):
    """A 0.6 s pause, past the VAD's silence but shorter than the slow decode of its
    final: the eager end is taken back (TurnResumed) and the two sentences are one turn,
    ended after the second."""
    from audio_fixtures import conversation
    from conftest import as_received
    from fake_engine import FakeEngine

    audio, truth = conversation(
        [("en-us", "The cat sat on the mat."), ("en-us", "Good morning, everyone.")],
        gap_s=0.6,
        trim=True,
    )
    audio = as_received(audio)
    _, server = await start(FakeEngine(step_s=0.3), token=KEY)
    got = await flux_session(server.port, audio, pace_s=0.1, eager_eot_threshold="0.5")
    events = _turn_events(got)
    assert events[0] == (0, "StartOfTurn") and events[-1] == (0, "EndOfTurn"), events
    assert (0, "TurnResumed") in events
    end = [m for m in got if m.type == "TurnInfo" and m.event == "EndOfTurn"][-1]
    assert [w.word for w in end.words] == end.transcript.split()
    assert end.words[0].start < truth[0].end and end.words[-1].end > truth[1].start
