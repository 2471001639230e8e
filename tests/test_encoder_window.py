"""Encoder passes over the audio a clip has (models/encoder.py): the window's length, the
short path's arithmetic, the signs of a decode that ran on, and its second attempt."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from audio_fixtures import SAMPLE_WAV, read_wav, sample_turns
from parley.core.asr import AsrRequest, Transcription
from parley.core.attempts import RETRY_MARGIN_S, better_attempt, second_attempt, transcribe
from parley.core.quality import repeats_itself
from parley.models.encoder import (
    FRAMES_PER_SECOND,
    encoder_layers,
    pass_frames,
    token_bound,
    window_frames,
)


def test_a_window_covers_the_clip_and_its_margin_in_whole_seconds_and_no_more_than_30_s():
    assert window_frames(2.0, 3.0, 1500) == 250
    assert window_frames(2.01, 3.0, 1500) == 300  # a part of a second is a second
    assert window_frames(28.0, 3.0, 1500) == 1500
    assert window_frames(2.0, None, 1500) == 1500
    assert token_bound(0.0) < token_bound(1.0) < token_bound(5.0)


@given(st.floats(0.0, 40.0), st.floats(0.5, 30.0))
def test_short_windows_come_in_at_most_30_lengths_each_holding_its_clip_and_margin(seconds, margin):
    """Every distinct length of pass costs oneDNN kernels (and their memory) of its own:
    a whole second of positions at a time, so at most 30 lengths in all."""
    frames = window_frames(seconds, margin, 1500)
    assert frames == 1500 or frames >= (seconds + margin) * FRAMES_PER_SECOND
    assert frames % FRAMES_PER_SECOND == 0 and 0 < frames <= 1500


@pytest.mark.parametrize(
    "text",
    [
        "Hello? Hello? Hello?",
        "This is Diane in New Jersey. This is Diane in New Jersey.",
        "I'm in New Jersey now, though. I'm in New Jersey now, though. I'm in",
        "no, no, no",
    ],
)
def test_a_text_that_says_itself_again_repeats_itself(text):
    assert repeats_itself(text)


@pytest.mark.parametrize(
    "text",
    [
        "Hello? Hello.",
        "thank you, thank you",
        "I think that I think so.",
        "This is Diane in New Jersey. This is Diane",
        "",
    ],
)
def test_what_people_say_twice_is_not_a_repetition(text):
    assert not repeats_itself(text)


@given(st.lists(st.integers(0, 10_000), unique=True, max_size=60))
def test_words_never_said_twice_never_repeat(ids):
    assert not repeats_itself(" ".join(f"w{i}" for i in ids))


@given(
    st.lists(st.integers(0, 50), min_size=3, max_size=10),
    st.lists(st.integers(0, 50), max_size=10),
)
def test_a_run_of_three_words_or_more_said_twice_in_a_row_repeats(run, before):
    words = [f"w{i}" for i in before + run + run]
    assert repeats_itself(" ".join(words))


def test_a_decode_that_ran_on_is_decoded_again_over_a_wider_window_then_the_whole_one():
    request = AsrRequest(np.zeros(16000, np.float32), bias=None)
    ran_on = Transcription("", (), window_too_short=True, avg_logprob=-0.1)
    wider = second_attempt(request, ran_on)
    assert wider == replace(request, margin_s=RETRY_MARGIN_S)
    again = second_attempt(wider, ran_on)
    assert again == replace(wider, whole_window=True)
    assert second_attempt(again, ran_on) is None  # the whole window is the last resort
    whole = Transcription("hello", (1,), avg_logprob=-0.9)
    assert better_attempt(ran_on, whole) is whole


def test_a_wider_margin_widens_only_its_own_request_and_never_narrows_the_window():
    clip = np.zeros(16000, np.float32)
    plain, wider = AsrRequest(clip), AsrRequest(clip, margin_s=RETRY_MARGIN_S)
    assert pass_frames([plain], 3.0, 1500) == window_frames(1.0, 3.0, 1500)
    assert pass_frames([plain, wider], 3.0, 1500) == window_frames(1.0, RETRY_MARGIN_S, 1500)
    assert pass_frames([wider], 20.0, 1500) == window_frames(1.0, 20.0, 1500)
    assert pass_frames([wider], None, 1500) == 1500  # no margin: every window whole


def test_the_short_path_over_the_whole_window_is_transformers_forward(tiny_engine):
    features = tiny_engine.features(read_wav(SAMPLE_WAV)[: 16000 * 5])
    encoder = tiny_engine.model.model.encoder
    with torch.inference_mode():
        expected = encoder(features).last_hidden_state
        got = encoder_layers(encoder, features, encoder.config.max_source_positions)
    assert torch.equal(got, expected)


@pytest.fixture(scope="module")
def short_window_engine(models_dir):
    """tiny.en encoding half a second of padding after each clip: too little for some
    clips, whose decodes then run on."""
    from parley.models.device import plan_device
    from parley.models.whisper_engine import WhisperEngine
    from parley.weights.bundle import resolve_model

    return WhisperEngine(
        resolve_model("tiny.en", models_dir),
        "tiny.en",
        plan_device("cpu", "float32"),
        window_margin_s=0.5,
    )


def test_decodes_that_run_on_over_short_windows_come_out_as_the_whole_windows(
    short_window_engine,
):
    """Over sample.wav's turns, a short window's decode either ends within its audio's
    token bound and says nothing twice, or is flagged, text and words dropped, and
    ``transcribe`` gives what the wider window gives, or the whole window's where that
    ran on too."""
    engine = short_window_engine

    def one_look(request: AsrRequest) -> tuple[bool, Transcription]:
        """``request`` decoded once, with no second attempt: whether its window was
        short, and the result."""
        (decode,) = engine.start([request])
        while not decode.finished:
            engine.step([decode], [0])
        return decode.short_window, engine.finish(decode)

    flagged = wider_ran_on = 0
    audio = read_wav(SAMPLE_WAV)
    for turn in sample_turns():
        clip = audio[int(turn.start * 16000) : int(turn.end * 16000)]
        request = AsrRequest(clip, with_words=True)
        short, first = one_look(request)
        assert short
        if first.window_too_short:
            flagged += 1
            assert (first.text, first.words) == ("", ())
            wider = replace(request, margin_s=RETRY_MARGIN_S)
            last = wider if not one_look(wider)[1].window_too_short else None
            wider_ran_on += last is None
            kept = transcribe(engine, last or replace(wider, whole_window=True), budget=0)
            assert transcribe(engine, request, budget=0).text == kept.text
        else:
            assert len(first.tokens) < token_bound(request.seconds)
            assert not repeats_itself(first.text)
            if first.text:  # (not dropped as no speech)
                assert first.words and first.words[-1].end <= request.seconds + 0.02
    assert flagged >= 1  # the margin is short enough that the test sees one
    assert wider_ran_on < flagged  # the wider window mends some


def test_the_settings_reach_the_engine_and_the_scheduler(models_dir):
    """``asr.window_margin_s`` is the engine's margin; ``asr.short_final_windows`` the
    scheduler's (off by default: finals ask for whole windows)."""
    from parley.config import Settings
    from parley.loading import load_asr

    default, _ = load_asr(Settings(models_dir=models_dir))
    assert (default.engine.window_margin_s, default.short_finals) == (3.0, False)
    asked = Settings(models_dir=models_dir, asr={"window_margin_s": 5, "short_final_windows": True})
    worker, _ = load_asr(asked)
    assert (worker.engine.window_margin_s, worker.short_finals) == (5.0, True)
