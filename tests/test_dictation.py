"""Spoken punctuation written as its mark (protocol.md section 3a, Deepgram's
``dictation``): the mark replaces the punctuation Whisper put around the command, a
sentence's mark capitalises the next word, a command said as a noun stays; in partials
and finals, live and pre-recorded. The fake engine hears words w0 … w9; the caller's
``replace`` writes them as a word and a command, so the wires carry commands."""

import wave

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import pcm16
from fake_engine import FakeEngine
from parley.core.dictation import MARKS, dictate_text
from parley.core.replacements import check_replacements
from parley.protocol.messages import Final, FinalReason, StreamConfig, Word
from parley.transport.deepgram_query import listen_config
from parley.workers.decoding import StreamDecoding
from test_compat import deepgram_session, listen_recording

SAID = [f"w{k}:done period" for k in range(10)]  # every word the fake engine hears


@pytest.mark.parametrize(
    "spoken, written",
    [
        (
            "Patient presents with a headache comma nausea comma and vomiting period "
            "they report the headache started two days ago period",
            "Patient presents with a headache, nausea, and vomiting. They report the "
            "headache started two days ago.",
        ),
        # Whisper's own punctuation around a command gives way to the command's mark
        ("a headache, comma, nausea", "a headache, nausea"),
        ("two days ago. Period. They left", "two days ago. They left"),
        ("Is it serious question mark call me", "Is it serious? Call me"),
        ("Call me now exclamation point", "Call me now!"),
        ("Stop exclamation mark", "Stop!"),
        ("It is done full stop", "It is done."),
        ("The list colon milk semicolon eggs", "The list: milk; eggs"),
        ("milk semi-colon eggs Question-mark", "milk; eggs?"),
        ("quoted period “yes”", "quoted. “Yes”"),
        # said as a noun: after a determiner, or before "of"
        ("a period of calm", "a period of calm"),
        ("the colon is an organ", "the colon is an organ"),
        ("each comma counts", "each comma counts"),
        ("after that period of time", "after that period of time"),
        ("Put a question mark here", "Put a question mark here"),
        # a command that begins the text has no word before it: its mark alone
        ("period", "."),
        ("Comma and more", ", and more"),
        # not a command
        ("commas periods colonel", "commas periods colonel"),
        ("", ""),
    ],
)
def test_commands_become_marks(spoken, written):
    assert dictate_text(spoken) == written


COMMANDS = ["comma", "period", "full stop", "question mark", "colon", "exclamation point"]
PLAIN = ["yes", "milk", "Eggs", "ok.", "now,", "stop", "question"]  # no two make a command


@given(st.lists(st.sampled_from(COMMANDS + PLAIN), max_size=12))
def test_every_other_word_stays_in_order_and_no_command_is_left(parts):
    """Of plain words and commands (no determiner among them), every plain word stays, in
    order (its case and punctuation aside), and no command's word is left."""
    out = dictate_text(" ".join(parts)).split()
    spoken = [w for w in out if any(c.isalpha() for c in w)]  # a mark alone has no letters
    plain = [p for p in parts if p in PLAIN]
    assert [w.strip(".,?:;!").lower() for w in spoken] == [p.strip(".,").lower() for p in plain]
    assert not any(w.strip(".,?:;!").lower() in MARKS for w in out)


def test_a_final_keeps_its_words_times_and_speakers():
    """The mark joins the word before it, which keeps its own times; the command's
    words leave; the next word is capitalised and keeps its times; text follows words."""
    decoding = StreamDecoding.of(StreamConfig(dictation=True), FakeEngine())
    words = [
        Word("vomiting", 0.0, 0.5, 0.9, "S1"),
        Word("period.", 0.6, 0.9, 0.8, "S1"),
        Word("they", 1.0, 1.2, 0.7, "S2"),
        Word("left", 1.2, 1.5, 0.9, "S2"),
    ]
    out = decoding.final(
        Final(3, 0.0, 1.5, "vomiting period. they left", FinalReason.SILENCE, words)
    )
    assert out.words == [
        Word("vomiting.", 0.0, 0.5, 0.9, "S1"),
        Word("They", 1.0, 1.2, 0.7, "S2"),
        Word("left", 1.2, 1.5, 0.9, "S2"),
    ]
    assert out.text == "vomiting. They left"
    assert decoding.partial_text("milk comma eggs") == "milk, eggs"
    plain = StreamDecoding.of(StreamConfig(), FakeEngine())
    assert plain.final(Final(0, 0, 1, "a comma", FinalReason.SILENCE)).text == "a comma"
    assert plain.partial_text("milk comma eggs") == "milk comma eggs"


def test_dictation_is_a_stream_option_and_deepgrams():
    assert StreamConfig.from_query({"dictation": "true"}).dictation
    assert not StreamConfig.from_query({}).dictation
    raw = {"encoding": "linear16", "sample_rate": "16000"}
    assert listen_config({**raw, "dictation": "true"}).dictation
    assert not listen_config(raw).dictation
    assert "dictation" not in StreamConfig().to_query()  # a default is left out


async def test_deepgram_live_and_prerecorded_results_write_the_marks(start, talk):
    """deepgram-sdk's live client with dictation=true: interim and final transcripts
    and words carry marks, never the command; the pre-recorded endpoint's the same."""
    audio, _ = talk
    _, server = await start()
    assert check_replacements(SAID)
    got = await deepgram_session(
        server.port, audio, pace_s=0.03, interim_results="true", replace=SAID, dictation="true"
    )
    results = [m for m in got if m.type == "Results"]
    assert {r.is_final for r in results} == {True, False}
    alternatives = [r.channel.alternatives[0] for r in results]
    assert {w for a in alternatives for w in a.transcript.split()} <= {"done.", "Done."}
    finals = [a for r, a in zip(results, alternatives) if r.is_final]
    assert {w.punctuated_word for a in finals for w in a.words} == {"done.", "Done."}
    assert {w.word for a in finals for w in a.words} == {"done"}

    params = [("replace", item) for item in SAID] + [("dictation", "true")]
    alternative = await listen_recording(server.port, audio, params)
    assert set(alternative["transcript"].split()) == {"done.", "Done."}
    assert {w["punctuated_word"] for w in alternative["words"]} == {"done.", "Done."}


async def test_recordings_through_openais_endpoint_and_the_client_write_the_marks(
    start, talk, tmp_path
):
    """The OpenAI endpoint's Parley field ``dictation``, as ``parley transcribe --url
    --dictation`` sends it (``transcribe_file``): the text carries marks, not commands."""
    import asyncio

    from parley.client.files import transcribe_file

    audio, _ = talk
    _, server = await start()
    path = tmp_path / "talk.wav"
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1), out.setsampwidth(2), out.setframerate(16000)
        out.writeframes(pcm16(audio))
    url = f"http://127.0.0.1:{server.port}"
    decoding = {"replace": SAID, "dictation": True}
    text = await asyncio.to_thread(transcribe_file, url, path, "text", decoding=decoding)
    assert set(text.split()) == {"done.", "Done."}, text
    plain = await asyncio.to_thread(transcribe_file, url, path, "text", decoding={"replace": SAID})
    assert set(plain.split()) == {"done", "period"}, plain
