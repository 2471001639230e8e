"""The real server on loopback with the real tiny.en weights: what the model hears."""

import pytest

from audio_fixtures import (
    SAMPLE_WAV,
    conversation,
    read_wav,
    sample_reference_text,
    talk_over_far_crowd,
    wer,
    words_of,
)
from conftest import chunks_of, serve_real
from parley.client.stream import run_stream, stream_url
from parley.core.policy import PartialPacing
from parley.protocol.messages import StreamConfig


@pytest.fixture
def start(models_dir, servers):
    """Start real servers on port 0 with setting overrides (stopped after)."""

    async def _start(token: str | None = None, **sections):
        return await servers(await serve_real(models_dir, token, **sections))

    return _start


async def test_sample_in_real_time_is_transcribed_with_partials(start):
    """sample.wav streamed in real time: WER ≤ 0.25, partials before finals, sane times."""
    url, _ = await start()
    audio = read_wav(SAMPLE_WAV)[6 * 16000 :]  # from just before the first word
    result = await run_stream(stream_url(url, StreamConfig(), None), chunks_of(audio), 32000)
    assert result.errors == [] and result.close_code == 1000
    assert result.started.config.encoding == "pcm_s16le"
    hypothesis = " ".join(f.text for f in result.finals)
    assert wer(sample_reference_text(), hypothesis) <= 0.25
    assert result.ended.audio_duration == pytest.approx(24.0, abs=0.01)
    # Partials are shed under load, by design, down to one per max_interval_s: a final
    # longer than that always had one, and on an idle machine every spoken one does.
    partial_ids = {p.segment_id for p in result.partials}
    spoken = {f.segment_id for f in result.finals if f.end - f.start > 2.0}
    longest = PartialPacing().max_interval_s + 1.0
    long = {f.segment_id for f in result.finals if f.end - f.start > longest}
    assert spoken & partial_ids and long <= partial_ids
    # each partial with words carries its decode's mean token probability
    assert all(0 < p.confidence < 1 for p in result.partials if p.text)
    times = [t for f in result.finals for t in (f.start, f.end)]
    assert times == sorted(times) and times[-1] <= 24.0
    for final in result.finals:
        assert final.speaker is None
        assert all(final.start <= w.start <= w.end <= final.end for w in final.words)


async def test_fast_streaming_applies_back_pressure_and_loses_nothing(start):
    """--fast sends as fast as the server reads; every turn still ends in a final."""
    url, _ = await start(asr={"queue_size": 2})
    audio, truth = conversation(
        [
            ("en-us", "The cat sat on the mat."),
            ("en-us", "The train leaves from platform number nine."),
            ("en-us", "Good morning, everyone."),
        ],
        gap_s=0.8,
    )
    result = await run_stream(
        stream_url(url, StreamConfig(), None), chunks_of(audio), 32000, fast=True
    )
    assert result.errors == [] and result.ended.segments == 3
    heard = words_of(" ".join(f.text for f in result.finals))
    assert {"mat", "train", "platform", "morning"} <= set(heard)


async def test_a_far_crowd_in_a_meetings_pauses_writes_nothing_there(start):
    """A far-off crowd's murmur 20 dB under a meeting's talk fills its 4 s pauses and
    reaches the VAD as speech: tiny.en writes sentences over it in two pauses, each at a
    mean log-probability under -1 (bench/nonspeech.py). Streamed as fast as the server
    takes it, each of those finals is judged against the talk's finals before it, and
    comes out empty; the talk keeps its words."""
    url, _ = await start()
    audio, turns = talk_over_far_crowd(5)
    result = await run_stream(
        stream_url(url, StreamConfig(partials=False), None), chunks_of(audio), 32000, fast=True
    )
    assert result.errors == []
    in_pauses = [
        f for f in result.finals if all(f.end <= u.start or f.start >= u.end for u in turns)
    ]
    assert len(in_pauses) >= 2 and all(f.text == "" for f in in_pauses), in_pauses
    heard = " ".join(f.text for f in result.finals)
    assert wer(" ".join(u.text for u in turns), heard) < 0.2, heard
