"""Word times from the real aligner (tiny.en), against speech whose every word's place is
known: words spoken one at a time by espeak-ng and joined without pauses the VAD
would see, so that no word's time can come from the edge of a voiced region."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from audio_fixtures import audible_span, silence, speak
from parley.core.audio import SAMPLE_RATE

pytestmark = pytest.mark.weights

SENTENCE = "The travel costs look much higher than last year because the team visits customers"
JOIN_S = 0.06  # between words: far under any pause the VAD or the aligner would keep


def spoken_word_by_word(text: str) -> tuple[np.ndarray, list[tuple[str, float, float]]]:
    """The words said one at a time, cut to their audible span and joined; (audio, each
    word with its start and end)."""
    pieces, truth, at = [silence(0.3)], [], 0.3
    for word in text.split():
        audio = speak(word)
        start, end = audible_span(audio)
        piece = audio[int(start * SAMPLE_RATE) : int(end * SAMPLE_RATE)]
        truth.append((word, at, at + len(piece) / SAMPLE_RATE))
        pieces += [piece, silence(JOIN_S)]
        at += len(piece) / SAMPLE_RATE + JOIN_S
    pieces.append(silence(0.5))
    return np.concatenate(pieces), truth


def test_each_word_is_timed_where_it_was_said(tiny_engine):
    """The words read right are placed where they were said: their middles within a
    tenth of a second at the median, most within 0.2 s. A token is placed by the
    cross-attention of the row that chose it (the one before it), as openai/whisper
    places it; placed by its own row, every word here came 0.3 to 0.5 s late. (A word
    ends where the next begins, so its end takes the join after it too.)"""
    audio, truth = spoken_word_by_word(SENTENCE)
    result = tiny_engine.transcribe(audio, with_words=True)
    said = {w.lower(): (start, end) for w, start, end in truth}
    errors = [
        (word.start + word.end - sum(said[key])) / 2
        for word in result.words
        if (key := word.word.strip(" .,").lower()) in said
    ]
    assert len(errors) >= 0.7 * len(truth), result.text  # most words read right
    assert abs(statistics.median(errors)) <= 0.1, (result.words, truth)
    near = sum(abs(error) <= 0.2 for error in errors)
    assert near >= 0.8 * len(errors), (result.words, truth)
