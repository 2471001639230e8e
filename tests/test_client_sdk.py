"""parley.client.live, the async Python client, against a real server on loopback
(fake engine): typed results, finalize, end, refusals."""

import asyncio

import pytest

from conftest import chunks_of, heard_between
from parley.client.live import LiveStream, ServerError, send_paced
from parley.protocol.messages import (
    EndReason,
    Final,
    Finalized,
    FinalReason,
    SessionEnded,
    SpeechStarted,
    StreamConfig,
)


async def test_typed_results_finalize_and_end(start, talk):
    """Send the first turn, finalize mid-silence, send the rest, end: the iteration yields
    the protocol's dataclasses in stream order and stops after SessionEnded; each Final is
    exactly its audio; the transcript keeps them all."""
    audio, truth = talk
    url, _ = await start(token="k")
    split = int((truth[0].end + 0.1) * 16000)
    async with await LiveStream.connect(url, StreamConfig(partials=False), token="k") as live:
        assert live.started.config.partials is False and live.started.model == "fake"

        async def send():
            async for chunk in chunks_of(audio[:split]):
                await live.send(chunk)
            await live.finalize()
            await send_paced(live, chunks_of(audio[split:]), 32000, fast=True)

        sending = asyncio.create_task(send())
        messages = [m async for m in live]
        await sending
    kinds = [type(m) for m in messages]
    assert kinds[-1] is SessionEnded and messages[-1].reason is EndReason.END_OF_STREAM
    assert Finalized in kinds and SpeechStarted in kinds
    finals = [m for m in messages if isinstance(m, Final)]
    assert finals[0].reason is FinalReason.FINALIZE
    for final in finals:
        assert final.text == heard_between(audio, final.start, final.end)
        assert all(w.start <= w.end for w in final.words)
    assert live.transcript.finals == finals
    assert live.close_code == 1000


async def test_a_refusal_is_a_server_error_with_its_close_code(start):
    url, _ = await start(token="k")
    with pytest.raises(ServerError) as refused:
        await LiveStream.connect(url, token="wrong")
    assert refused.value.error.code == "unauthorized" and refused.value.close_code == 4401


def test_known_speakers_names_show_in_place_of_their_labels():
    """After ``speaker_names``, the transcript and the live display show a named label's
    name, in finals sent before it too; the others keep their labels."""
    import io

    from parley.client.stream import LiveDisplay
    from parley.client.transcript import Transcript
    from parley.protocol.messages import Final, FinalReason, SpeakerNames, Word

    def final(segment_id: int, speaker: str) -> Final:
        words = [Word("Hello.", segment_id, segment_id + 0.5, 0.9, speaker)]
        return Final(
            segment_id, segment_id, segment_id + 0.5, "Hello.", FinalReason.SILENCE, words, speaker
        )

    out = io.StringIO()
    display, transcript = LiveDisplay(out, show_partials=False), Transcript()
    for message in (final(0, "S2"), final(1, "S1"), SpeakerNames({"S2": "host"}), final(2, "S2")):
        display(message)
        transcript.apply(message)
    lines = out.getvalue().splitlines()
    assert [line.split("] ")[-1] for line in lines] == [
        "S2: Hello.",
        "S1: Hello.",
        "(S2 is host)",
        "host: Hello.",
    ]
    assert [f.speaker for f in transcript.finals] == ["host", "S1", "host"]
    assert [w.speaker for f in transcript.finals for w in f.words] == ["host", "S1", "host"]
    assert transcript.speakers() == ["host", "S1"]
