"""A session driven in-process (no transport), decoding with the fake engine."""

import asyncio

import numpy as np
import pytest

from audio_fixtures import SAMPLE_RATE, conversation, silence, speak
from fake_engine import FakeEngine, hear, text_of
from parley.core.vad import VadConfig
from parley.protocol.messages import (
    Final,
    Finalized,
    FinalReason,
    Partial,
    SegmentEnded,
    SessionEnded,
    SpeechStarted,
    StreamConfig,
)
from parley.sessions.session import Session
from parley.sessions.session_options import SessionOptions
from parley.workers.scheduler import AsrScheduler


@pytest.fixture
async def worker():
    worker = AsrScheduler(FakeEngine(encode_s=0.01), capacity=8)
    await worker.start()
    yield worker
    await worker.stop()


def heard(audio: np.ndarray, start: float, end: float) -> str:
    """What the fake engine hears in ``audio`` between two stream times."""
    piece = audio[round(start * SAMPLE_RATE) : round(end * SAMPLE_RATE)]
    return text_of([token for token, _, _ in hear(piece)])


async def drive(
    session: Session, audio: np.ndarray, chunk_s: float = 0.1, pace: float = 0.0
) -> list:
    """Feed audio in chunks (sleeping ``pace`` × chunk between them), end, collect messages."""

    async def feed():
        step = int(chunk_s * SAMPLE_RATE)
        for i in range(0, len(audio), step):
            await session.feed_audio(audio[i : i + step])
            await asyncio.sleep(pace * chunk_s)
        await session.end()

    messages, _ = await asyncio.gather(collect(session), feed())
    return messages


async def collect(session: Session) -> list:
    return [m async for m in session.messages()]


async def test_turns_become_finals_with_words(worker):
    """Each spoken turn becomes one final with its words, timed inside the segment."""
    audio, truth = conversation(
        [("en-us", "Good morning, everyone."), ("en-us", "Please open the window.")]
    )
    session = Session(StreamConfig(partials=False), worker, SessionOptions(VadConfig()))
    messages = await drive(session, audio)
    finals = [m for m in messages if isinstance(m, Final)]
    assert len(finals) == len(truth)
    for final in finals:
        assert final.text == heard(audio, final.start, final.end) != ""
        assert final.reason is FinalReason.SILENCE and final.speaker is None
        starts = [w.start for w in final.words]
        assert starts == sorted(starts)
        assert all(final.start <= w.start <= w.end <= final.end for w in final.words)
        assert [w.word for w in final.words] == final.text.split()
    assert isinstance(messages[-1], SessionEnded)
    assert messages[-1].segments == 2
    assert messages[-1].audio_duration == pytest.approx(len(audio) / SAMPLE_RATE)


async def test_partials_come_before_their_final(worker):
    """While a long turn is spoken in real time, partials for it arrive before its final,
    each with the language it was decoded in, as the final has."""
    speech = speak(
        "This sentence is long enough to be decoded a few times while it is still "
        "being spoken by the synthetic voice."
    )
    audio = np.concatenate([silence(0.3), speech, silence(1.0)])
    session = Session(StreamConfig(), worker, SessionOptions(VadConfig(), partial_interval_s=0.5))
    messages = await drive(session, audio, pace=0.3)
    kinds = [type(m).__name__ for m in messages]
    assert kinds[0] == "SpeechStarted" and kinds[-2:] == ["Final", "SessionEnded"]
    partials = [m for m in messages if isinstance(m, Partial)]
    assert len(partials) >= 2
    final = messages[-2]
    assert all(p.segment_id == final.segment_id and p.start == final.start for p in partials)
    ends = [p.end for p in partials]
    assert ends == sorted(ends) and ends[-1] <= final.end
    assert {p.language for p in partials} == {final.language} == {"en"}


async def test_finalize_flushes_mid_speech(worker):
    """finalize closes the open segment: segment_ended at once, then its final, then the
    finalized message."""
    speech = speak("Flush this sentence before it is over, please.")
    session = Session(StreamConfig(partials=False), worker, SessionOptions(VadConfig()))
    reader = asyncio.create_task(collect(session))
    await session.feed_audio(np.concatenate([silence(0.3), speech[: len(speech) * 2 // 3]]))
    await session.finalize()
    await session.feed_audio(silence(0.5))
    await session.end()
    messages = await reader
    types = [type(m) for m in messages]
    assert types == [SpeechStarted, SegmentEnded, Final, Finalized, SessionEnded]
    ended, final = messages[1], messages[2]
    assert ended.reason is final.reason is FinalReason.FINALIZE
    assert ended.segment_id == final.segment_id and ended.end == final.end
    assert final.end == pytest.approx(messages[3].audio_end, abs=0.001)
    fed = np.concatenate([silence(0.3), speech[: len(speech) * 2 // 3]])
    assert final.text == heard(fed, final.start, final.end) != ""


async def test_speech_cut_off_by_end_of_stream_is_still_transcribed(worker):
    """Audio that ends mid-sentence ends in a final with reason end_of_stream."""
    speech = speak("The stream stops while I am still talking")
    audio = np.concatenate([silence(0.3), speech])
    session = Session(StreamConfig(partials=False), worker, SessionOptions(VadConfig()))
    messages = await drive(session, audio)
    finals = [m for m in messages if isinstance(m, Final)]
    assert len(finals) == 1 and finals[0].reason is FinalReason.END_OF_STREAM
    assert finals[0].text == heard(audio, finals[0].start, finals[0].end) != ""


async def test_two_sessions_share_a_worker_without_mixing(worker):
    """Concurrent sessions on one worker each get only their own words."""
    a = np.concatenate([silence(0.3), speak("I would like a cup of coffee please."), silence(0.8)])
    b = np.concatenate(
        [silence(0.3), speak("The train leaves from platform number nine."), silence(0.8)]
    )
    options = SessionOptions(VadConfig())
    first, second = (Session(StreamConfig(), worker, options) for _ in range(2))
    got_a, got_b = await asyncio.gather(drive(first, a), drive(second, b))
    for audio, got in ((a, got_a), (b, got_b)):
        finals = [m for m in got if isinstance(m, Final)]
        assert finals and all(f.text == heard(audio, f.start, f.end) for f in finals)
