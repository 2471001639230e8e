"""The vendors' own clients against a real Parley (tiny.en, speaker models): a two-voice
espeak conversation through deepgram-sdk, the openai package's realtime client and
livekit-plugins-deepgram's STT streams (Deepgram's /v1/listen and Flux's /v2/listen),
each transcribed with WER ≤ 0.10; Deepgram's diarize=true tells the two voices apart."""

import asyncio
import base64

import aiohttp
import numpy as np
import pytest
from livekit import rtc
from livekit.agents import stt as agents_stt
from livekit.plugins import assemblyai as livekit_assemblyai
from livekit.plugins import deepgram as livekit_deepgram
from openai import AsyncOpenAI

from audio_fixtures import DIALOGUE_LINES, PLAIN_VOICES, conversation, dialogue, wer
from conftest import pcm16
from test_assemblyai import aai_session
from test_compat import at_24k, deepgram_session, realtime_events
from test_flux import flux_session

MAX_WER = 0.10


@pytest.fixture(scope="module")
def meeting():
    """Four turns of two espeak voices; the audio, the text said and the turns."""
    audio, truth = conversation(
        [(PLAIN_VOICES[k % 2], DIALOGUE_LINES[k]) for k in range(4)], gap_s=0.6
    )
    return audio, " ".join(u.text for u in truth), truth


async def test_deepgram_sdk_live_client(diarized_server, meeting):
    """Sent in real time with interim results and diarize=true, cut just after the last
    word and flushed with Finalize: the finals read the conversation, the flush is
    from_finalize, the words carry two speaker ids that follow the voices, and every
    interim comes before its turn's final. (Interims are partials, which a busy server
    sheds by design, so how many come depends on the machine: that each turn has one is
    test_compat's, on the fake engine.)"""
    audio, said, truth = meeting
    cut = round((truth[-1].end + 0.1) * 16000)  # before the pause that would end it
    got = await deepgram_session(
        diarized_server.port,
        audio[:cut],
        pace_s=0.1,
        finalize=True,
        interim_results="true",
        diarize="true",
        punctuate="true",
    )
    results = [m for m in got if m.type == "Results"]
    finals = [r for r in results if r.is_final]
    for i, interim in enumerate(results):
        if not interim.is_final:
            assert next(r for r in results[i + 1 :] if r.is_final).start == interim.start
    heard = " ".join(r.channel.alternatives[0].transcript for r in finals)
    assert wer(said, heard) <= MAX_WER, heard
    assert finals[-1].from_finalize
    words = [w for r in finals for w in r.channel.alternatives[0].words]
    assert len({w.speaker for w in words}) >= 2
    by_turn = []
    for turn in truth:
        ids = [w.speaker for w in words if turn.start <= (w.start + w.end) / 2 <= turn.end]
        by_turn.append(max(set(ids), key=ids.count))
    assert by_turn[0] == by_turn[2] != by_turn[1] == by_turn[3]
    assert got[-1].type == "Metadata"


async def test_openai_realtime_transcription_session(diarized_server, meeting):
    """A transcription session with server VAD, audio at 24 kHz in 100 ms appends: the
    completed transcripts read the conversation."""
    audio, said, _ = meeting
    client = AsyncOpenAI(api_key="unused", base_url=f"http://127.0.0.1:{diarized_server.port}/v1")
    completed = []
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as rt:
        await rt.session.update(
            session={
                "type": "transcription",
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": 24000},
                        "transcription": {"model": "gpt-4o-transcribe", "language": "en"},
                        "turn_detection": {"type": "server_vad"},
                    }
                },
            }
        )
        data = pcm16(at_24k(audio))
        for i in range(0, len(data), 4800):
            await rt.input_audio_buffer.append(audio=base64.b64encode(data[i : i + 4800]).decode())
        await rt.input_audio_buffer.commit()  # all was committed by VAD: its error ends it
        while True:
            event = await asyncio.wait_for(rt.recv(), timeout=120)
            if event.type == "conversation.item.input_audio_transcription.completed":
                completed.append(event.transcript)
            elif event.type == "error":
                assert event.error.code == "input_audio_buffer_commit_empty"
                break
    assert wer(said, " ".join(completed)) <= MAX_WER, completed


async def livekit_events(make_stt, audio, pause_s: float) -> list:
    """Every speech event of a LiveKit Agents STT stream (``make_stt(http_session)``) fed
    ``audio`` in 10 ms frames as a room track gives them, ``pause_s`` after each 100 ms."""
    data = pcm16(audio)
    events = []
    async with aiohttp.ClientSession() as http:
        stream = make_stt(http).stream()

        async def feed():
            for i in range(0, len(data), 320):
                frame = data[i : i + 320]
                stream.push_frame(rtc.AudioFrame(frame, 16000, 1, len(frame) // 2))
                if i % 3200 == 0:
                    await asyncio.sleep(pause_s)
            stream.end_input()

        async def receive():
            async for event in stream:
                events.append(event)

        feeding = asyncio.create_task(feed())
        await asyncio.wait_for(receive(), timeout=300)  # a failure, never a hang
        await feeding
    return events


def read_turns(events: list, said: str) -> list:
    """The final transcripts of LiveKit speech events, checked to read ``said`` (WER ≤
    0.10), each between a start and an end of speech; the finals' speech data."""
    kinds = agents_stt.SpeechEventType
    finals = [e.alternatives[0] for e in events if e.type is kinds.FINAL_TRANSCRIPT]
    assert wer(said, " ".join(f.text for f in finals)) <= MAX_WER, [f.text for f in finals]
    starts = [e for e in events if e.type is kinds.START_OF_SPEECH]
    ends = [e for e in events if e.type is kinds.END_OF_SPEECH]
    assert len(starts) == len(ends) >= 1
    return finals


async def test_livekit_deepgram_plugin_stt_stream(diarized_server, meeting):
    """LiveKit Agents' Deepgram plugin, base_url on Parley, fed 10 ms frames as a room
    track gives them: start and end of speech around final transcripts that read the
    conversation, with speaker ids."""
    audio, said, _ = meeting
    events = await livekit_events(
        lambda http: livekit_deepgram.STT(
            api_key="unused",
            http_session=http,
            base_url=f"http://127.0.0.1:{diarized_server.port}/v1/listen",
            sample_rate=16000,
            enable_diarization=True,
        ),
        audio,
        0.02,
    )
    finals = read_turns(events, said)
    assert len({f.speaker_id for f in finals}) == 2
    assert len([e for e in events if e.type is agents_stt.SpeechEventType.END_OF_SPEECH]) >= 2


async def test_livekit_deepgram_flux_plugin_stt_stream(diarized_server, meeting):
    """LiveKit Agents' Deepgram Flux plugin (STTv2, eager mode), base_url on Parley's
    /v2/listen, fed 10 ms frames: start and end of speech around final transcripts that
    read the conversation, each turn's preflight transcript before its final."""
    audio, said, _ = meeting
    events = await livekit_events(
        lambda http: livekit_deepgram.STTv2(
            api_key="unused",
            http_session=http,
            base_url=f"ws://127.0.0.1:{diarized_server.port}/v2/listen",
            sample_rate=16000,
            eager_eot_threshold=0.5,
        ),
        audio,
        0.05,
    )
    finals = read_turns(events, said)
    kinds = agents_stt.SpeechEventType
    assert len([e for e in events if e.type is kinds.END_OF_SPEECH]) == len(finals)
    order = [
        e.type for e in events if e.type in (kinds.PREFLIGHT_TRANSCRIPT, kinds.FINAL_TRANSCRIPT)
    ]
    assert all(
        order[i - 1] is kinds.PREFLIGHT_TRANSCRIPT
        for i, k in enumerate(order)
        if k is kinds.FINAL_TRANSCRIPT
    )


async def test_livekit_assemblyai_plugin_stt_stream(diarized_server, meeting):
    """LiveKit Agents' AssemblyAI plugin (Universal-Streaming v3, formatted turns,
    speaker labels), base_url on Parley, fed 10 ms frames: start and end of speech around
    final transcripts that read the conversation, each with its voice's label."""
    audio, said, _ = meeting
    events = await livekit_events(
        lambda http: livekit_assemblyai.STT(
            api_key="unused",
            http_session=http,
            base_url=f"ws://127.0.0.1:{diarized_server.port}",
            sample_rate=16000,
            format_turns=True,
            speaker_labels=True,
        ),
        audio,
        0.05,
    )
    finals = read_turns(events, said)
    assert len([e for e in events if e.type is agents_stt.SpeechEventType.END_OF_SPEECH]) == len(
        finals
    )
    # speaker_labels: each turn names its voice (how many turns there are depends on how
    # soon each final is decoded: speech begun again before it goes on with the turn)
    assert all(f.speaker_id in ("A", "B") for f in finals)


def _turns_as_revised(events: list) -> dict[int, list]:
    """Each turn's final words as a client keeps them: the latest Turn's, then every
    SpeakerRevision applied in its place (each revises the speakers of words the turn
    already holds, its texts and times unchanged, and at least one of them)."""
    turns: dict[int, list] = {}
    for event in events:
        if type(event).__name__ == "TurnEvent" and not event.turn_is_formatted:
            turns[event.turn_order] = [w for w in event.words if w.word_is_final]
        elif type(event).__name__ == "SpeakerRevisionEvent":
            for revised in event.revisions:
                held = turns[revised.turn_order]
                assert [(w.text, w.start, w.end) for w in revised.words] == [
                    (w.text, w.start, w.end) for w in held
                ]
                assert [w.speaker for w in revised.words] != [w.speaker for w in held]
                speakers = [w.speaker for w in revised.words]
                assert revised.speaker_label == max(set(speakers), key=speakers.count)
                turns[revised.turn_order] = revised.words
    return turns


async def test_assemblyai_sdk_speaker_revisions_and_max_speakers(diarized_server):
    """AssemblyAI's own client, speaker_labels on, a meeting of three voices sent as fast
    as the server takes it: a newcomer's first words, confirmed later, are revised with
    SpeakerRevision (texts and times kept), and the turns as revised give each voice one
    label of its own. With max_speakers=2 no third label is shown."""
    audio, truth = dialogue(["A", "B", "C"], turns=12)
    events = await aai_session(diarized_server.port, audio, pace_s=0, speaker_labels=True)
    assert type(events[-1]).__name__ == "TerminationEvent"  # every turn in
    assert any(type(e).__name__ == "SpeakerRevisionEvent" for e in events)
    words = [w for turn in _turns_as_revised(events).values() for w in turn]
    by_voice: dict[str, set] = {}
    for said in truth:
        heard = [
            w.speaker
            for w in words
            if said.start - 0.3 <= (w.start + w.end) / 2000 <= said.end + 0.3
        ]
        top = max(set(heard), key=heard.count)
        assert heard.count(top) >= 0.7 * len(heard)
        by_voice.setdefault(said.voice, set()).add(top)
    assert all(len(labels) == 1 for labels in by_voice.values())
    assert set.union(*by_voice.values()) == {"A", "B", "C"}
    capped = await aai_session(
        diarized_server.port, audio, pace_s=0, speaker_labels=True, max_speakers=2
    )
    assert type(capped[-1]).__name__ == "TerminationEvent"
    shown = {w.speaker for turn in _turns_as_revised(capped).values() for w in turn}
    assert shown == {"A", "B"}


async def test_a_turn_paused_mid_sentence_goes_on_after_the_pause(diarized_server):
    """A caller breaks off at "… a flight to", pauses 1.2 s, then says where, in real time:
    on Flux (deepgram-sdk, default eot_threshold) and AssemblyAI (its own client, default
    end_of_turn_confidence_threshold) the turn does not end at the pause, whose text
    reads unfinished (Updates and Turns say how finished, under the threshold), but once
    the sentence is done: one turn, holding both halves, as OpenAI's semantic_vad gives
    one item. Before, each wire ended a turn at the pause (bench/turns.py). Broken off
    for good, the turn ends after the longest quiet (Flux's eot_timeout_ms: trigger
    timeout; semantic_vad's eagerness)."""
    halves = [("en-us", "I would like to book a flight to"), ("en-us", "Paris on Friday morning.")]
    audio, _ = conversation(halves, gap_s=1.2, trim=True)
    broken_off, _ = conversation(halves[:1], lead_s=0.5, trim=True)
    broken_off = np.concatenate([broken_off, np.zeros(16000 * 2, dtype=np.float32)])
    semantic = {"audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}}
    hasty = {"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "high"}}}}
    commit = [{"type": "input_audio_buffer.commit"}]
    port = diarized_server.port
    flux, assembly, left, openai, openai_left = await asyncio.gather(
        flux_session(port, audio, pace_s=0.1),
        aai_session(port, audio, pace_s=0.1),
        flux_session(port, broken_off, pace_s=0.1, eot_timeout_ms="800"),
        realtime_events(port, audio, semantic, then=commit, key="unused", pace_s=0.1),
        realtime_events(port, broken_off, hasty, then=commit, key="unused", pace_s=0.1),
    )
    ends = [m for m in flux if m.type == "TurnInfo" and m.event == "EndOfTurn"]
    assert len(ends) == 1 and "flight" in ends[0].transcript and "Paris" in ends[0].transcript
    assert ends[0].trigger == "model", ends
    paused = [m for m in flux if m.type == "TurnInfo" and m.event == "Update" and m.transcript]
    assert any(m.end_of_turn_confidence < 0.7 for m in paused)
    turns = [e for e in assembly if type(e).__name__ == "TurnEvent"]
    ended = [t for t in turns if t.end_of_turn and t.transcript]
    assert len(ended) == 1 and "flight" in ended[0].transcript and "paris" in ended[0].transcript
    assert any(t.end_of_turn_confidence < 0.4 for t in turns if t.transcript and not t.end_of_turn)
    (end,) = [m for m in left if m.type == "TurnInfo" and m.event == "EndOfTurn"]
    assert end.trigger == "timeout" and "flight" in end.transcript
    # OpenAI's semantic_vad: one item; broken off for good, committed after eagerness
    # high's 2 s of quiet (before the client's commit, which then finds nothing)
    for events, said in ((openai, ("flight", "Paris")), (openai_left, ("flight",))):
        (done,) = [e for e in events if e["type"].endswith("transcription.completed")]
        assert all(word in done["transcript"] for word in said), done
        assert events[-1]["error"]["code"] == "input_audio_buffer_commit_empty"
