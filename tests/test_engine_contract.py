"""The ``Transcriber`` contract (``parley.core.asr``), one suite run against both engines:
the fake that the transport and server tests stand on, and the real Whisper engine on
tiny.en. What the scheduler relies on holds for both, so a test that passes on the
fake says something about the server on the real model."""

from __future__ import annotations

import numpy as np
import pytest

from audio_fixtures import SAMPLE_WAV, read_wav
from fake_engine import FakeEngine
from parley.core.asr import AsrRequest, Decoding, Task, Transcription
from parley.core.attempts import transcribe
from parley.core.audio import SAMPLE_RATE

ROWS = 3  # enough for a batch; few, so that filling every row costs little


@pytest.fixture(scope="module", params=["fake", pytest.param("whisper", marks=pytest.mark.weights)])
def engine(request):
    if request.param == "fake":
        return FakeEngine(max_rows=ROWS)
    from parley.models.device import plan_device
    from parley.models.whisper_engine import WhisperEngine
    from parley.weights.bundle import resolve_model

    models_dir = request.getfixturevalue("models_dir")
    return WhisperEngine(
        resolve_model("tiny.en", models_dir),
        "tiny.en",
        plan_device("cpu", "float32"),
        max_rows=ROWS,
    )


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    """Five seconds of one real voice (sample.wav, 6 s in), at a level where the fake
    hears words in every second of it."""
    audio = read_wav(SAMPLE_WAV)[6 * SAMPLE_RATE : 11 * SAMPLE_RATE]
    return (audio * (0.5 / np.abs(audio).max())).astype(np.float32)


def run_to_end(engine, decodes, budgets):
    """Step ``decodes`` until every one is finished, checking each step's reports."""
    results: dict[int, Transcription] = {}
    live = list(range(len(decodes)))
    while True:  # a decode may be finished from the start (the fake hears no word)
        for i in [i for i in live if decodes[i].finished]:
            results[i] = engine.finish(decodes[i])
            live.remove(i)
        if not live:
            return [results[i] for i in range(len(decodes))]
        reports = engine.step([decodes[i] for i in live], [budgets[i] for i in live])
        assert len(reports) == len(live)
        for i, report in zip(live, reports):
            assert 0 <= report.accepted <= report.proposed <= budgets[i]
            assert report.width == 1 + report.proposed


def test_it_declares_its_limits(engine):
    assert isinstance(engine.label, str) and engine.label
    assert engine.max_rows >= 1 and engine.max_draft >= 1 and engine.max_prompt_tokens >= 1
    assert 0 < engine.max_audio_s <= 30.0
    assert "en" in engine.languages
    assert isinstance(engine.multilingual, bool)


def test_an_english_only_model_refuses_other_languages_and_translation(engine, speech):
    assert not engine.multilingual
    engine.check_language("en")
    engine.check_language(None)
    engine.check_decoding(Decoding(language="en", keyterms=("Parley",)))
    for refused in (Decoding(language="fr"), Decoding(languages=frozenset({"en", "de"}))):
        with pytest.raises(ValueError):
            engine.check_decoding(refused)
    with pytest.raises(ValueError):
        engine.check_decoding(Decoding(task=Task.TRANSLATE))
    with pytest.raises(ValueError):
        engine.start([AsrRequest(speech, language="fr")])


def test_audio_over_its_limit_is_refused(engine):
    too_long = np.zeros(int((engine.max_audio_s + 1) * SAMPLE_RATE), np.float32)
    with pytest.raises(ValueError):
        engine.start([AsrRequest(too_long)])


def test_batched_decodes_give_what_each_gives_alone(engine, speech):
    """Rows of one batch, one drafting at the most it may and one not at all, give the
    same tokens as each request decoded alone: batching and budgets change speed only."""
    alone = transcribe(engine, AsrRequest(speech, with_words=True))
    assert alone.text.strip() and alone.tokens
    halves = [speech, speech[: len(speech) // 2]]
    decodes = engine.start([AsrRequest(audio, with_words=True) for audio in halves])
    together = run_to_end(engine, decodes, [0, engine.max_draft])
    assert together[0].tokens == alone.tokens
    assert together[1].tokens == transcribe(engine, AsrRequest(halves[1])).tokens
    for result, audio in zip(together, halves):
        seconds = len(audio) / SAMPLE_RATE
        starts = [w.start for w in result.words]
        assert starts == sorted(starts)
        assert all(0.0 <= w.start <= w.end <= seconds + 1e-6 for w in result.words)


def test_drafts_never_change_the_result(engine, speech):
    """Lossless: a right draft, a wrong one and a half-right one give the tokens that
    plain greedy decoding gives; a right draft is accepted."""
    plain = transcribe(engine, AsrRequest(speech)).tokens
    wrong = tuple(t + 1 for t in plain)
    half = plain[: len(plain) // 2] + wrong[len(plain) // 2 :]
    for draft in (plain, wrong, half):
        result = transcribe(engine, AsrRequest(speech, draft=draft))
        assert result.tokens == plain
        if draft is plain:
            assert result.stats.accepted > 0


def test_a_decode_told_not_to_repeat_itself_never_does_and_drafts_do_not_change_it(engine, speech):
    """``no_repeat``: no run of that many tokens written twice (here one: no token twice,
    which the plain decode does write), with or without a draft, in a batch or alone."""
    plain = transcribe(engine, AsrRequest(speech)).tokens
    assert len(set(plain)) < len(plain)  # the rule has something to forbid
    alone = transcribe(engine, AsrRequest(speech, no_repeat=1)).tokens
    assert alone and len(set(alone)) == len(alone)
    for draft in (plain, alone):
        assert transcribe(engine, AsrRequest(speech, no_repeat=1, draft=draft)).tokens == alone
    decodes = engine.start([AsrRequest(speech, no_repeat=1), AsrRequest(speech)])
    assert [r.tokens for r in run_to_end(engine, decodes, [engine.max_draft, 0])] == [alone, plain]


def test_rows_are_bounded_and_freed(engine, speech):
    """At most max_rows decodes at once (one more is refused, the others untouched);
    dropping or finishing a decode frees its row."""
    piece = speech[: SAMPLE_RATE // 2]
    decodes = engine.start([AsrRequest(piece) for _ in range(engine.max_rows)])
    with pytest.raises(RuntimeError):
        engine.start([AsrRequest(piece)])
    for decode in decodes[1:]:
        engine.drop(decode)
    (first,) = run_to_end(engine, decodes[:1], [engine.max_draft])
    assert isinstance(first, Transcription)
    again = engine.start([AsrRequest(piece) for _ in range(engine.max_rows)])
    for decode in again:
        engine.drop(decode)


def test_the_prompt_is_held_to_its_length(engine):
    long_prompt = " ".join(["vocabulary"] * 99)
    vocabulary = engine.vocabulary(Decoding(prompt=long_prompt))
    assert 0 < len(vocabulary.prompt) <= engine.max_prompt_tokens
    assert len(engine.prompt_tokens(long_prompt)) <= engine.max_prompt_tokens
