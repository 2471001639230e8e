"""`parley serve` and `parley stream` as a user runs them: real processes, real files."""

import asyncio
import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pyannote.core import Annotation, Segment
from pyannote.database.util import load_rttm

from audio_fixtures import SAMPLE_WAV, conversation, der, sample_dir, words_of, write_wav
from conftest import SHARED_SERVER_ENV, free_port, pcm16
from parley.client.formats import render
from parley.client.transcript import SpeakerTurn, Transcript
from parley.protocol.messages import parse

PARLEY = [sys.executable, "-m", "parley"]


def serve(models_dir, *args):
    """`parley serve` in its own process on a free port; yields its stream URL."""
    port = free_port()
    env = {**os.environ, **SHARED_SERVER_ENV, "PARLEY_MODELS_DIR": str(models_dir)}
    process = subprocess.Popen(
        [*PARLEY, "serve", "--port", str(port), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    for line in process.stdout:
        if "Parley listening on" in line:
            break
        assert time.monotonic() < deadline and process.poll() is None, line
    yield f"ws://127.0.0.1:{port}/v1/stream"
    process.terminate()
    assert process.wait(timeout=30) == 0  # SIGTERM is a clean shutdown


@pytest.fixture(scope="module")
def server_url(models_dir):
    """`parley serve` on the default bundle with speaker labels, as `make run` starts it
    (but for the partials' share of a busy machine, ``SHARED_SERVER_ENV``)."""
    yield from serve(models_dir, "--diarization", "bundle")


def stream(url, *args, stdin=None):
    return subprocess.run(
        [*PARLEY, "stream", "--url", url, *args], input=stdin, capture_output=True, timeout=300
    )


@pytest.fixture(scope="module")
def dialogue_wav(tmp_path_factory):
    audio, truth = conversation(
        [
            ("en-us", "The cat sat on the mat."),
            ("en-gb", "The train leaves from platform number nine."),
        ]
    )
    return write_wav(tmp_path_factory.mktemp("cli") / "dialogue.wav", audio), truth, audio


def test_stream_sample_as_json(server_url):
    """`parley stream --format json` writes the finals with times, words and speaker;
    `--replace` reaches the server (Chicago, said once, is written as asked)."""
    done = stream(
        server_url, "--fast", "--format", "json", "--replace", "chicago:Windy City", str(SAMPLE_WAV)
    )
    assert done.returncode == 0, done.stderr
    finals = json.loads(done.stdout)
    heard = words_of(" ".join(f["text"] for f in finals))
    assert len(finals) >= 2 and "windy city" in " ".join(heard) and "chicago" not in heard
    for f in finals:
        assert set(f) == {"segment_id", "start", "end", "text", "reason", "speaker", "words"}
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


def foreground(command: list[str], **popen) -> subprocess.Popen:
    """``command`` started as a shell starts a foreground job: Ctrl-C at its default. A
    library this test process ran may have left SIGINT ignored (livekit-agents masks it
    while it spawns), and a child inherits an ignored signal, so Ctrl-C would not reach
    it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(command, **popen)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_ends_the_audio_there_and_the_last_finals_still_come(server_url, dialogue_wav):
    """`arecord | parley stream -` stopped with Ctrl-C: the first SIGINT ends the audio
    where it is (the pipe stays open, as a live source does), the finals of what was
    sent still come and are written, exit 0; no traceback."""
    _, _, audio = dialogue_wav
    process = foreground(
        [*PARLEY, "stream", "--url", server_url, "--format", "json", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:

        def speak() -> None:
            with contextlib.suppress(BrokenPipeError):  # it stopped reading: it was told to
                process.stdin.write(pcm16(audio))

        threading.Thread(target=speak, daemon=True).start()
        for line in process.stderr:  # the live finals (stdout gets the json at the end)
            if b"mat" in line.lower():
                break
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert b"stopping" in err and b"Traceback" not in err
    assert "mat" in words_of(" ".join(f["text"] for f in json.loads(out)))


def test_ctrl_c_stops_transcribe_waiting_on_a_server():
    """Ctrl-C while `parley transcribe --url` waits on a server that has not answered:
    "interrupted", exit 130, no traceback."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        process = foreground(
            [*PARLEY, "transcribe", str(SAMPLE_WAV)]
            + ["--url", f"http://127.0.0.1:{silent.getsockname()[1]}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            connection, _ = silent.accept()  # the upload is under way
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=60)
            connection.close()
        finally:
            process.kill()
    assert process.returncode == 130, err
    assert b"interrupted" in err and b"Traceback" not in err and not out, err


async def test_a_load_left_by_its_cancelled_caller_ends_quietly():
    """A model load on its own thread whose awaiting coroutine was cancelled (Ctrl-C
    during `parley transcribe`'s load) settles nothing the loop would complain of."""
    from parley.workers.threads import in_passing_thread

    complaints = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: complaints.append(context))
    for outcome in (lambda: time.sleep(0.2), lambda: 1 / (time.sleep(0.2) or 0)):
        waiting = asyncio.ensure_future(in_passing_thread(outcome))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    await asyncio.sleep(0.3)  # the threads' results arrive
    assert complaints == []


def test_stream_of_a_live_hls_url(server_url, dialogue_wav, tmp_path):
    """A URL (here an HLS playlist over HTTP, as a radio or a camera serves it) is read
    by ffmpeg as a file is."""
    path, _, _ = dialogue_wav
    subprocess.run(
        ["ffmpeg", "-nostdin", "-loglevel", "error", "-i", str(path), "-c:a", "aac"]
        + ["-f", "hls", "-hls_time", "2", "-hls_list_size", "0", str(tmp_path / "live.m3u8")],
        check=True,
    )
    handler = functools.partial(QuietHandler, directory=str(tmp_path))
    with ThreadingHTTPServer(("127.0.0.1", 0), handler) as http:
        threading.Thread(target=http.serve_forever, daemon=True).start()
        done = stream(server_url, "--fast", f"http://127.0.0.1:{http.server_port}/live.m3u8")
        http.shutdown()
    assert done.returncode == 0, done.stderr
    assert {"mat", "platform"} <= set(words_of(done.stdout.decode())), done.stdout


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def test_stream_reports_a_refusal(server_url, dialogue_wav):
    """A refused stream prints the server's error and exits non-zero."""
    path, _, _ = dialogue_wav
    done = stream(server_url, "--language", "fr", str(path))
    assert done.returncode == 1
    assert b"bad_config" in done.stdout + done.stderr


def test_stream_to_a_wrong_path_is_a_clear_error(server_url, dialogue_wav):
    """A URL that is not the stream endpoint (here Deepgram's wire) is named, no
    traceback; a server's bare address means its stream endpoint."""
    from parley.client.live import stream_url
    from parley.protocol.messages import StreamConfig

    path, _, _ = dialogue_wav
    done = stream(server_url.removesuffix("/v1/stream") + "/v1/listen", "--fast", str(path))
    assert done.returncode == 1
    assert b"/v1/stream" in done.stderr and b"Traceback" not in done.stderr
    for bare in ("ws://h:1", "ws://h:1/"):
        assert stream_url(bare, StreamConfig(), "k").startswith("ws://h:1/v1/stream?")


def test_stream_missing_file_is_a_clear_error(server_url):
    """A file that does not exist is named in the error."""
    done = stream(server_url, "/nonexistent.wav")
    assert done.returncode == 2 and b"no such file" in done.stderr


def test_stream_of_a_file_ffmpeg_cannot_read_says_why_and_exits_2(server_url, tmp_path):
    """Not audio: ffmpeg's own error, exit code 2 (no wait for the idle timeout)."""
    notes = tmp_path / "notes.txt"
    notes.write_text("minutes of the meeting\n")
    done = stream(server_url, str(notes))
    assert done.returncode == 2, done.stderr
    assert b"ffmpeg could not decode" in done.stderr and b"idle_timeout" not in done.stderr


async def test_an_undecodable_file_fails_the_stream_within_a_second(start, tmp_path):
    """The decoder's error ends the stream at once, not after the server's idle timeout."""
    from parley.client.stream import UndecodableAudio, ffmpeg_pcm, run_stream

    url, _ = await start()
    notes = tmp_path / "notes.txt"
    notes.write_text("minutes of the meeting\n")
    began = time.monotonic()
    with pytest.raises(UndecodableAudio, match="ffmpeg could not decode"):
        await run_stream(
            f"{url}?encoding=pcm_s16le&sample_rate=16000", ffmpeg_pcm(str(notes)), 32000
        )
    assert time.monotonic() - began < 1.0


def finished(process: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_transcribe_of_a_missing_or_unreadable_file_exits_2(
    server_url, models_dir, tmp_path, dialogue_wav
):
    """`parley transcribe`: a file that is not there is named before anything loads or is
    sent; a file that is no audio gets the decoder's reason, named by its file, in process
    (after the transcript of the file before it, which is not lost) and from a server; a
    known speaker's missing clip is a bad argument. All exit 2."""
    notes = tmp_path / "notes.txt"
    notes.write_text("minutes of the meeting\n")
    http = server_url.replace("ws://", "http://").removesuffix("/v1/stream")
    runs = {
        "missing": [str(tmp_path / "nowhere.wav")],
        "in process": [str(dialogue_wav[0]), str(notes)],
        "from a server": [str(notes), "--url", http],
        "a clip missing": [str(notes), "--url", http, "--speaker", f"host={tmp_path}/no.wav"],
        "a cue too narrow": [str(notes), "--format", "srt", "--max-line-width", "3"],
    }
    env = {**os.environ, "PARLEY_MODELS_DIR": str(models_dir)}
    started = {  # at once: each is a process of its own
        name: subprocess.Popen(
            [*PARLEY, "transcribe", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for name, args in runs.items()
    }
    done = {name: finished(process) for name, process in started.items()}
    assert {name: d.returncode for name, d in done.items()} == dict.fromkeys(runs, 2)
    assert b"no such file" in done["missing"].stderr
    for name in ("in process", "from a server"):
        assert b"notes.txt: the file could not be decoded" in done[name].stderr, name
    assert b"--speaker host: no such file" in done["a clip missing"].stderr
    assert b"a line holds 8 to 1000 characters" in done["a cue too narrow"].stderr
    assert "platform" in words_of(done["in process"].stdout.decode())
    assert not any(b"Traceback" in d.stderr for d in done.values())


@pytest.mark.parametrize("command", ["stream", "transcribe"])
def test_a_server_that_is_not_there_is_named_and_exits_3(command, dialogue_wav):
    """A refused connection: "cannot reach HOST:PORT: is `parley serve` running?", exit 3,
    at once and without a traceback."""
    path, _, _ = dialogue_wav
    port = free_port()
    url = f"ws://127.0.0.1:{port}/v1/stream" if command == "stream" else f"http://127.0.0.1:{port}"
    done = subprocess.run(
        [*PARLEY, command, "--url", url, str(path)], capture_output=True, timeout=60
    )
    assert done.returncode == 3, done.stderr
    assert f"cannot reach 127.0.0.1:{port}: is `parley serve` running?".encode() in done.stderr
    assert b"Traceback" not in done.stderr


def test_render_formats():
    """The writers number SRT blocks and use each format's time syntax."""
    transcript = Transcript()
    for final in [
        {
            "type": "final",
            "segment_id": 0,
            "start": 1.5,
            "end": 3.25,
            "text": "Hello there.",
            "reason": "silence",
            "speaker": None,
            "words": [],
        },
        {
            "type": "final",
            "segment_id": 1,
            "start": 61.0,
            "end": 62.0,
            "text": "",
            "reason": "silence",
            "speaker": None,
            "words": [],
        },
    ]:
        transcript.apply(parse(final))
    assert render(transcript, "srt") == "1\n00:00:01,500 --> 00:00:03,250\nHello there.\n"
    assert render(transcript, "vtt") == ("WEBVTT\n\n00:00:01.500 --> 00:00:03.250\nHello there.\n")
    assert json.loads(render(transcript, "json"))[1]["start"] == 61.0
    assert render(transcript, "text") == "[00:00:01.500 --> 00:00:03.250] Hello there.\n"
    assert render(transcript, "rttm", "talk") == (
        "SPEAKER talk 1 1.500 1.750 <NA> <NA> unknown <NA> <NA>\n"
    )


def word(text, start, end, speaker):
    return {"word": text, "start": start, "end": end, "probability": 0.9, "speaker": speaker}


def final_of(segment_id, start, end, words, reason="silence"):
    """A final message of these words (their text joined), labelled with its first
    word's speaker."""
    return parse(
        {
            "type": "final",
            "segment_id": segment_id,
            "start": start,
            "end": end,
            "text": " ".join(w["word"] for w in words),
            "reason": reason,
            "speaker": words[0]["speaker"],
            "words": words,
        }
    )


def test_the_transcript_applies_speaker_updates_and_joins_words_into_turns():
    """A speaker_update replaces the final's speakers; turns split at a new speaker or a
    pause over 0.5 s; labels are listed in order of first appearance."""
    transcript = Transcript()
    transcript.apply(
        final_of(
            3,
            0.0,
            3.0,
            [
                word("a", 0.1, 0.5, "S1"),
                word("b", 0.6, 1.0, "S1"),
                word("c", 1.8, 2.2, "S1"),
                word("d", 2.3, 2.9, "S1"),
            ],
            reason="speaker_change",
        )
    )
    transcript.apply(
        parse(
            {
                "type": "speaker_update",
                "segment_id": 3,
                "speaker": "S2",
                "words": [
                    word("a", 0.1, 0.5, "S2"),
                    word("b", 0.6, 1.0, "S2"),
                    word("c", 1.8, 2.2, "S1"),
                    word("d", 2.3, 2.9, "S1"),
                ],
            }
        )
    )
    transcript.apply(
        parse({"type": "speaker_update", "segment_id": 9, "speaker": "S1", "words": []})
    )
    assert transcript.speakers() == ["S2", "S1"]
    assert transcript.turns() == [SpeakerTurn(0.1, 1.0, "S2"), SpeakerTurn(1.8, 2.9, "S1")]


def test_text_writes_a_line_for_each_speakers_run_of_a_final():
    """A final that holds a change of turn without a pause is written as a line a
    speaker, each with its run's times (the first from the final's start, the last to
    its end): not all under the speaker who said most of it."""
    transcript = Transcript()
    runs = [("S1", "I didn't know.", 7.2, 8.3), ("S2", "Neither did I.", 8.5, 9.4)]
    runs.append(("S1", "Okay then.", 9.8, 10.6))
    words = []
    for speaker, text, start, end in runs:  # the run's time shared among its words
        step = (end - start) / len(text.split())
        for k, said in enumerate(text.split()):
            words.append(word(said, start + k * step, start + (k + 1) * step, speaker))
    transcript.apply(final_of(0, 7.0, 12.0, words))
    assert render(transcript, "text") == (
        "[00:00:07.000 --> 00:00:08.300] S1: I didn't know.\n"
        "[00:00:08.500 --> 00:00:09.400] S2: Neither did I.\n"
        "[00:00:09.800 --> 00:00:12.000] S1: Okay then.\n"
    )


def test_a_pause_as_long_as_the_servers_sets_turns_apart():
    """A speaker's words 0.3 s apart (the server's pause, TurnConfig.pause_s) are two
    turns in what --format rttm writes; closer words are one."""
    transcript = Transcript()
    transcript.apply(
        final_of(
            1,
            0.0,
            3.0,
            [word("a", 0.0, 0.5, "S1"), word("b", 0.79, 1.2, "S1"), word("c", 1.5, 2.0, "S1")],
        )
    )
    assert transcript.turns() == [SpeakerTurn(0.0, 1.2, "S1"), SpeakerTurn(1.5, 2.0, "S1")]


@pytest.mark.parametrize(
    "asked", [["--diarization", "--speaker", "host={clip}"], ["--num-speakers", "2"]]
)
def test_stream_with_diarization_writes_speakers_that_score_like_the_reference(
    server_url, asked, tmp_path
):
    """`parley stream --diarization --format json` on sample.wav (or --num-speakers 2, which
    implies it): every word has a speaker, two in all, S1 first, or the second named by
    --speaker from a clip of its voice; their turns (the ones `--format rttm` writes) score
    like the reference (DER with a 0.25 s collar, streamed faster than real time)."""
    from audio_fixtures import read_wav

    clip = write_wav(tmp_path / "host.wav", read_wav(SAMPLE_WAV)[int(21.8 * 16000) : 27 * 16000])
    asked = [arg.format(clip=clip) for arg in asked]
    done = stream(server_url, "--fast", *asked, "--format", "json", str(SAMPLE_WAV))
    assert done.returncode == 0, done.stderr
    transcript = Transcript()
    for final in json.loads(done.stdout):
        transcript.apply(parse({"type": "final", **final}))
    labels = ["S1", "host"] if "--speaker" in asked else ["S1", "S2"]
    words = [w for f in transcript.finals for w in f.words]
    assert words and all(w.speaker in labels for w in words)
    assert transcript.speakers() == labels
    hypothesis = Annotation()
    for k, turn in enumerate(transcript.turns()):
        hypothesis[Segment(turn.start, turn.end), k] = turn.speaker
    reference = load_rttm(str(sample_dir() / "sample.rttm"))["sample"]
    assert der(reference, hypothesis) <= 0.15


async def test_stream_takes_the_key_from_token_or_the_environment(start, dialogue_wav):
    """--token (else $PARLEY_TOKEN) is the API key; without one a keyed server refuses."""
    import asyncio

    url, _ = await start(token="k3y")
    path, _, _ = dialogue_wav

    async def cli(*args, env_token=None):
        env = {k: v for k, v in os.environ.items() if k != "PARLEY_TOKEN"}
        if env_token:
            env["PARLEY_TOKEN"] = env_token
        process = await asyncio.create_subprocess_exec(
            *PARLEY,
            "stream",
            "--url",
            url,
            "--fast",
            "--no-partials",
            *args,
            str(path),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await process.communicate()
        return process.returncode, out.decode(), err.decode()

    code, out, _ = await cli("--token", "k3y")
    assert code == 0 and out.count("-->") >= 2
    assert (await cli(env_token="k3y"))[0] == 0
    code, out, err = await cli()
    assert code == 1 and "unauthorized" in out + err


@pytest.mark.parametrize(
    "args, why",
    [
        (["--host", "0.0.0.0"], "refusing to serve 0.0.0.0 without API keys"),
        (
            ["--replicas", "2", "--max-replicas", "1"],
            "cluster.max_replicas must be at least cluster.replicas",
        ),
    ],
)
def test_cluster_checks_its_settings_before_starting_ray(args, why):
    """`parley cluster` refuses bad settings like `serve`, before it starts any Ray."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PARLEY_TOKEN", "PARLEY_API_KEYS", "PARLEY_ALLOW_ANONYMOUS")
    }
    run = subprocess.run(
        [*PARLEY, "cluster", *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 2 and why in run.stderr, run.stderr
