"""``parley.local.Parley``: the file pipeline in a script or a notebook, no server."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from audio_fixtures import conversation, words_of, write_wav
from parley.local import Parley
from parley.recordings.media import UndecodableAudio


def test_a_script_and_a_notebook_transcribe_files_and_samples(models_dir, tmp_path):
    """A file and 16 kHz samples are transcribed, also from a thread whose event loop
    runs (a notebook's); bad audio and options are refused with their reasons, and a
    closed one says so."""
    audio, _ = conversation([("en-gb", "The train leaves from platform number nine.")])
    path = write_wav(tmp_path / "train.wav", audio)
    notes = tmp_path / "notes.txt"
    notes.write_text("minutes of the meeting\n")
    with Parley(models_dir=models_dir, compute_type="float32") as parley:
        from_file = parley.transcribe(path, language="en")

        async def in_a_notebook():
            return parley.transcribe(audio.astype(np.float64), keyterms=["Paddington"])

        from_samples = asyncio.run(in_a_notebook())
        with pytest.raises(ValueError, match="one channel"):
            parley.transcribe(np.stack([audio, audio]))
        with pytest.raises(UndecodableAudio, match="could not be decoded"):
            parley.transcribe(notes)
        with pytest.raises(ValueError, match="English-only"):
            parley.transcribe(audio, language="fr")
        with pytest.raises(ValueError, match="need diarization"):
            parley.transcribe(audio, known_speakers={"host": audio})
    for result in (from_file, from_samples):
        assert {"platform", "nine"} <= set(words_of(result.text)), result.text
        assert result.language == "en" and result.speakers == ()
        assert abs(result.duration - len(audio) / 16000) < 0.01
        words = [w for final in result.finals for w in final.words]
        assert words and all(0 <= w.start <= w.end <= result.duration for w in words)
    assert [turn.speaker for turn in from_file.transcript().turns()] == [None]
    with pytest.raises(RuntimeError, match="not started"):
        parley.transcribe(audio)
