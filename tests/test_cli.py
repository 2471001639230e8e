"""`parley serve` and `parley stream` as a user runs them: real processes, real files."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from audio_fixtures import SAMPLE_WAV, conversation, words_of, write_wav
from parley.client.formats import render

PARLEY = [sys.executable, "-m", "parley"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server_url(models_dir):
    """`parley serve` on the default bundle, as `make run` starts it."""
    port = free_port()
    env = {**os.environ, "PARLEY_MODELS_DIR": str(models_dir)}
    process = subprocess.Popen([*PARLEY, "serve", "--port", str(port)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    for line in process.stdout:
        if "Parley listening on" in line:
            break
        assert time.monotonic() < deadline and process.poll() is None, line
    yield f"ws://127.0.0.1:{port}/v1/stream"
    process.terminate()
    assert process.wait(timeout=30) == 0  # SIGTERM is a clean shutdown


def stream(url, *args, stdin=None):
    return subprocess.run([*PARLEY, "stream", "--url", url, *args], input=stdin,
                          capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def dialogue_wav(tmp_path_factory):
    audio, truth = conversation([("en-us", "The cat sat on the mat."),
                                 ("en-gb", "The train leaves from platform number nine.")])
    return write_wav(tmp_path_factory.mktemp("cli") / "dialogue.wav", audio), truth, audio


def test_stream_sample_as_json(server_url):
    """`parley stream --format json` writes the finals with times, words and speaker."""
    done = stream(server_url, "--fast", "--format", "json", str(SAMPLE_WAV))
    assert done.returncode == 0, done.stderr
    finals = json.loads(done.stdout)
    assert len(finals) >= 2 and "chicago" in words_of(" ".join(f["text"] for f in finals))
    for f in finals:
        assert set(f) == {"segment_id", "start", "end", "text", "speaker", "words"}
        assert 0 <= f["start"] < f["end"] <= 30.0


@pytest.mark.parametrize("fmt, first_line", [("srt", "1"), ("vtt", "WEBVTT"), ("text", "[")])
def test_stream_subtitle_and_text_formats(server_url, dialogue_wav, fmt, first_line):
    """srt, vtt and text outputs hold the spoken words with timestamps."""
    path, _, _ = dialogue_wav
    done = stream(server_url, "--fast", "--format", fmt, str(path))
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    assert out.splitlines()[0].startswith(first_line)
    assert "-->" in out and "platform" in out.lower()


def test_stream_raw_pcm_from_stdin_at_8k(server_url, dialogue_wav):
    """`-` reads raw PCM16 from stdin at the --sample-rate given (telephony rate here)."""
    _, _, audio = dialogue_wav
    pcm8k = (audio[::2] * 32767).astype("<i2").tobytes()  # crude 2:1 decimation is enough
    done = stream(server_url, "--fast", "--sample-rate", "8000", "-", stdin=pcm8k)
    assert done.returncode == 0, done.stderr
    assert "mat" in words_of(done.stdout.decode())


def test_stream_reports_a_refusal(server_url, dialogue_wav):
    """A refused stream prints the server's error and exits non-zero."""
    path, _, _ = dialogue_wav
    done = stream(server_url, "--language", "fr", str(path))
    assert done.returncode == 1
    assert b"bad_config" in done.stdout + done.stderr


def test_stream_to_a_wrong_path_is_a_clear_error(server_url, dialogue_wav):
    """A URL that is not the stream endpoint (here the static page) is named, no traceback."""
    path, _, _ = dialogue_wav
    done = stream(server_url.removesuffix("/v1/stream") + "/", "--fast", str(path))
    assert done.returncode == 1
    assert b"/v1/stream" in done.stderr and b"Traceback" not in done.stderr


def test_stream_missing_file_is_a_clear_error(server_url):
    """A file that does not exist is named in the error."""
    done = stream(server_url, "/nonexistent.wav")
    assert done.returncode == 2 and b"no such file" in done.stderr


def test_render_formats():
    """The writers number SRT blocks and use each format's time syntax."""
    finals = [{"segment_id": 0, "start": 1.5, "end": 3.25, "text": "Hello there.",
               "speaker": None, "words": []},
              {"segment_id": 1, "start": 61.0, "end": 62.0, "text": "", "speaker": None,
               "words": []}]
    assert render(finals, "srt") == "1\n00:00:01,500 --> 00:00:03,250\nHello there.\n"
    assert render(finals, "vtt") == "WEBVTT\n\n00:00:01.500 --> 00:00:03.250\nHello there.\n"
    assert json.loads(render(finals, "json"))[1]["start"] == 61.0
    assert render(finals, "text") == "[00:00:01.500 --> 00:00:03.250] Hello there.\n"
