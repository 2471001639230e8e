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
from parley.sessions.arrivals import ARRIVALS_KEPT, Arrivals
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


class Client:
    """A client's audio messages as ``Arrivals`` sees them, on a clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0
        self.stream_time = 0.0
        self.arrivals = Arrivals(clock=lambda: self.now)

    def send(self, seconds: float, pace: float, chunk_s: float = 0.1) -> list[bool]:
        """``seconds`` of audio in ``chunk_s`` messages, ``pace`` times as fast as real
        time: whether the client reads as real time after each message."""
        read = []
        for _ in range(round(seconds / chunk_s)):
            self.now += chunk_s / pace
            self.stream_time += chunk_s
            self.arrivals.note(self.stream_time)
            read.append(self.arrivals.realtime())
        return read


def test_a_client_sending_in_real_time_reads_as_real_time():
    """In real time, in large messages, after audio buffered before connecting, or
    after more messages than are kept, a client reads as real time; faster, it does
    not, and it reads as real time again once its window is real time."""
    steady = Client()
    assert all(steady.send(60.0, pace=1.0))
    assert all(Client().send(30.0, pace=1.0, chunk_s=1.0))
    buffered = Client()
    assert buffered.send(1.0, pace=50.0) == [True] * 10
    assert all(buffered.send(30.0, pace=1.0))
    assert all(Client().send(ARRIVALS_KEPT * 0.03, pace=1.0, chunk_s=0.01))
    replay = Client()
    assert not any(replay.send(30.0, pace=3.0)[25:])  # fast from 2 s of audio on
    assert not any(steady.send(30.0, pace=5.0)[-200:])  # after a real-time minute
    after = steady.send(20.0, pace=1.0)
    assert not after[0] and all(after[-50:])


def test_arrivals_time_what_has_arrived():
    """``since``: how long ago the audio up to a stream time had arrived."""
    client = Client()
    client.send(2.0, pace=1.0)
    assert client.arrivals.since(1.0) == pytest.approx(1.0)
    assert client.arrivals.since(0.95) == pytest.approx(1.0)
    assert client.arrivals.since(2.5) is None


async def test_only_a_real_time_clients_finals_take_short_windows_under_load():
    """With finals keeping the thread busy, a client streaming in real time has its
    later finals over short windows; the same audio sent at once keeps whole ones."""
    audio, truth = conversation([("en-us", "Yes."), ("en-us", "No.")], gap_s=0.5, lead_s=0.3)
    windows = {}
    for pace in (0.0, 1.0):
        engine = FakeEngine(encode_s=0.1)
        worker = AsrScheduler(engine, capacity=8, short_finals_busy=0.005)
        await worker.start()
        try:
            session = Session(StreamConfig(partials=False), worker, SessionOptions(VadConfig()))
            await drive(session, audio, pace=pace)
        finally:
            await worker.stop()
        windows[pace] = engine.whole_windows
    assert windows[0.0] == [True] * len(truth)
    assert windows[1.0][0] and not any(windows[1.0][1:]) and len(windows[1.0]) == len(truth)
