"""Profanity masked (protocol.md section 3a, Deepgram's ``profanity_filter``,
AssemblyAI's ``filter_profanity``): the first letter kept, the rest asterisks, plain
words untouched; in partials and finals, live and pre-recorded. The fake engine hears
words w0 … w9; the caller's ``replace`` writes them as a profane word, so the wires
carry one, and masking comes after it."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets.datastructures import Headers

from fake_engine import FakeEngine
from parley.core.profanity import is_profane, mask_text, masked
from parley.core.replacements import check_replacements
from parley.core.vad import VadConfig
from parley.protocol.messages import Final, FinalReason, ProtocolError, StreamConfig, Word
from parley.transport.assemblyai import AssemblyAIDialect
from parley.workers.decoding import StreamDecoding
from test_compat import deepgram_session, listen_recording

SWORN = [f"w{k}:shit" for k in range(10)]  # every word the fake engine hears, profane


@pytest.mark.parametrize(
    "word, want",
    [
        ("shit", "s***"),
        ("Fucking!", "F******!"),
        ("shit's", "s***'s"),
        ('"Bastards,"', '"B*******,"'),
        ("bull-shit.", "bull-s***."),
        ("motherfucker", "m***********"),
        ("dick.", "d***."),
        ("Dick", "Dick"),  # capitalised: a name
        ("f***ing", "f***ing"),  # masked by the model already
        # plain words, some of them holding a profane one's letters
        ("hell", "hell"),
        ("damn", "damn"),
        ("Scunthorpe", "Scunthorpe"),
        ("assassin", "assassin"),
        ("class", "class"),
        ("niggle", "niggle"),
        ("piston", "piston"),
        ("don't", "don't"),
        ("4111", "4111"),
        ("[redacted].", "[redacted]."),
    ],
)
def test_a_profane_word_keeps_its_first_letter_and_its_punctuation(word, want):
    assert masked(word) == want


PLAIN = ["the", "call", "Hello,", "assist", "Dick", "glasses", "shiitake", "hello."]
PROFANE = ["shit", "Fuck!", "bitches", "asshole,", "cunts.", "pissed"]


@given(st.lists(st.sampled_from(PLAIN + PROFANE), max_size=12))
def test_only_profane_words_change_and_each_keeps_its_length(words):
    out = mask_text(" ".join(words)).split()
    assert len(out) == len(words)
    for before, after in zip(words, out):
        if before in PLAIN:
            assert after == before
        else:
            assert after != before and len(after) == len(before) and after[0] == before[0]
            assert not is_profane(after.strip(".,!*")), after


def test_finals_and_partials_are_masked_after_the_replacements():
    """A replacement that writes a profane word is masked (replacements come first);
    a final's words keep their times and speaker, its text follows its words."""
    config = StreamConfig(replace=check_replacements(["heck:hell shit"]), profanity_filter=True)
    decoding = StreamDecoding.of(config, FakeEngine())
    words = decoding.respelled(
        [Word("What", 0.0, 0.2, 0.9, "S1"), Word("the", 0.2, 0.4, 0.9, "S1"),
         Word("heck!", 0.4, 0.8, 0.9, "S1")]
    )  # fmt: skip
    final = Final(0, 0.0, 0.8, decoding.text("", words), FinalReason.SILENCE, words)
    out = decoding.final(final)
    assert out.text == "What the hell s***!"
    assert out.words[-1] == Word("s***!", 0.6, 0.8, 0.9, "S1")
    assert decoding.partial_text("what the heck") == "what the hell s***"
    plain = StreamDecoding.of(StreamConfig(replace=config.replace), FakeEngine())
    assert plain.partial_text("what the heck") == "what the hell shit"


def test_assemblyais_filter_profanity_is_the_streams_and_is_checked():
    dialect = AssemblyAIDialect(VadConfig())
    query = {"sample_rate": "16000", "filter_profanity": "yes"}
    assert dialect.setup(query, Headers()).config.profanity_filter
    assert not dialect.setup({"sample_rate": "16000"}, Headers()).config.profanity_filter
    with pytest.raises(ProtocolError, match="filter_profanity"):
        dialect.setup({**query, "filter_profanity": "maybe"}, Headers())
    assert StreamConfig.from_query({"profanity_filter": "true"}).profanity_filter


async def test_deepgram_live_and_prerecorded_results_are_masked(start, talk):
    """deepgram-sdk's live client: interim and final Results, their transcripts and
    words, masked with profanity_filter=true; the pre-recorded endpoint's the same."""
    audio, _ = talk
    _, server = await start()
    got = await deepgram_session(
        server.port,
        audio,
        pace_s=0.03,
        interim_results="true",
        replace=SWORN,
        profanity_filter="true",
    )
    results = [m for m in got if m.type == "Results"]
    assert {r.is_final for r in results} == {True, False}
    alternatives = [r.channel.alternatives[0] for r in results]
    assert {w for a in alternatives for w in a.transcript.split()} == {"s***"}
    finals = [a for r, a in zip(results, alternatives) if r.is_final]
    assert {w.word for a in finals for w in a.words} == {"s***"}

    params = [("replace", item) for item in SWORN] + [("profanity_filter", "true")]
    alternative = await listen_recording(server.port, audio, params)
    assert set(alternative["transcript"].split()) == {"s***"}
    assert {w["word"] for w in alternative["words"]} == {"s***"}
