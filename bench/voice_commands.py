"""Voice commands over Wyoming, as Home Assistant sends them: Parley against
wyoming-faster-whisper, the server Home Assistant users run, on the same weights.

Twenty-four smart-home commands with known text, said by espeak-ng in two voices, each
its last audible sound followed by ``--trailing`` seconds of silence: Home Assistant's own VAD sends
``audio-stop`` once a command has been followed by 0.7 s of silence (its default
sensitivity; 0.25 s at its most aggressive). Each command is one Wyoming connection
through the ``wyoming`` package's client: ``transcribe`` (English), ``audio-start``,
100 ms chunks paced in real time, ``audio-stop``; then the events up to ``transcript``.
``--concurrent`` commands at once (satellites in several rooms), in one run per server,
silence and concurrency:

- Parley (`parley serve --wyoming-port 0`, tiny.en, its default compute type, and
  float32 as the CTranslate2 files are read on a CPU);
- wyoming-faster-whisper (PyPI, `--stt-library faster-whisper`) on the CTranslate2 files
  the tiny.en bundle is built from, 2 CPU threads, at its own default beam size on
  this CPU (5) and at 1 (greedy, as Parley decodes).

Reports WER over all commands (jiwer, the test suite's normalisation), and the latency
from sending ``audio-stop`` to receiving ``transcript``: median, p90 and max.
Usage: python bench/voice_commands.py [--concurrent 1 4] [--trailing 0.7 0.25]
[--systems ...] [--before PATH: also a Parley imported from PATH, a checkout's server/]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import socket
import sys
import tempfile
import time
from pathlib import Path

from common import LoggedProcess, print_table, write_json

import numpy as np
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient

from audio_fixtures import PLAIN_VOICES, audible_span, silence, speak, wer
from conftest import free_port
from load import Server

COMMANDS = [
    "Turn on the kitchen lights.",
    "Set the thermostat to warm.",
    "What is the weather like tomorrow?",
    "Close the garage door.",
    "Play some jazz in the living room.",
    "Turn off all the lights downstairs.",
    "Start a timer for the pasta.",
    "Lock the front door.",
    "Is the back door open?",
    "Dim the bedroom lights.",
    "Start the robot vacuum in the hallway.",
    "Add milk and eggs to the shopping list.",
    "What time is it in Tokyo?",
    "Open the blinds in the office.",
    "Turn the fan on in the nursery.",
    "Remind me to call my mother tonight.",
    "How much energy did we use today?",
    "Pause the music in the kitchen.",
    "Set the living room lamp to warm white.",
    "Turn off the television.",
    "Who is at the front door?",
    "Water the garden this evening.",
    "Cancel the timer.",
    "Good night.",
]
RATE, CHUNK_S = 16000, 0.1
SYSTEMS = [
    "parley auto",
    "parley float32",
    "wyoming-faster-whisper beam 5",
    "wyoming-faster-whisper beam 1",
]


def said(trailing_s: float) -> list[tuple[str, bytes]]:
    """Each command's text and its 16-bit audio, with the trailing silence."""
    out = []
    for k, text in enumerate(COMMANDS):
        speech = speak(text, PLAIN_VOICES[k % 2])
        _, end = audible_span(speech)  # espeak-ng's own ~0.4 s of silence cut off
        audio = np.concatenate([speech[: round(end * RATE)], silence(trailing_s)])
        out.append((text, (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()))
    return out


async def one_command(port: int, pcm: bytes) -> tuple[str, float]:
    """The transcript of one command, and the seconds from audio-stop to it; RuntimeError
    with the server's error event where it refused or ended the command."""
    try:
        return await _command(port, pcm)
    except ConnectionError as exc:
        raise RuntimeError(f"the connection was lost: {exc!r}") from None


async def _command(port: int, pcm: bytes) -> tuple[str, float]:
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Transcribe(language="en").event())
        await client.write_event(AudioStart(rate=RATE, width=2, channels=1).event())
        step = int(RATE * CHUNK_S) * 2
        began = time.monotonic()
        try:
            for k, i in enumerate(range(0, len(pcm), step)):
                chunk = AudioChunk(rate=RATE, width=2, channels=1, audio=pcm[i : i + step])
                await client.write_event(chunk.event())
                await asyncio.sleep(max(0.0, began + (k + 1) * CHUNK_S - time.monotonic()))
            await client.write_event(AudioStop().event())
        except ConnectionError:
            pass  # the server closed it: its error event says why, below
        stopped = time.monotonic()
        while (event := await client.read_event()) is not None:
            if Transcript.is_type(event.type):
                return Transcript.from_event(event).text, time.monotonic() - stopped
            if event.type == "error":
                raise RuntimeError(f"the server's error: {event.data}")
    raise RuntimeError("the server closed the connection before its transcript")


async def run(port: int, commands: list[tuple[str, bytes]], concurrent: int) -> dict:
    limit = asyncio.Semaphore(concurrent)

    async def limited(pcm: bytes) -> tuple[str, float]:
        async with limit:
            return await one_command(port, pcm)

    outcomes = await asyncio.gather(*(limited(pcm) for _, pcm in commands), return_exceptions=True)
    failed = [str(o) for o in outcomes if isinstance(o, BaseException)]
    heard = [o if not isinstance(o, BaseException) else ("", float("nan")) for o in outcomes]
    latencies = np.array([seconds for _, seconds in heard if seconds == seconds])
    return {
        "concurrent": concurrent,
        "failed": len(failed),
        "failures": failed,
        "wer": wer(" ".join(t for t, _ in commands), " ".join(text for text, _ in heard)),
        "latency_p50_s": float(np.percentile(latencies, 50)),
        "latency_p90_s": float(np.percentile(latencies, 90)),
        "latency_max_s": float(latencies.max()),
        "transcripts": [text for text, _ in heard],
    }


def faster_whisper_server(ct2: Path, beam: int) -> tuple[LoggedProcess, int]:
    port = free_port()
    argv = [
        *(sys.executable, "-m", "wyoming_faster_whisper", "--uri", f"tcp://127.0.0.1:{port}"),
        *("--model", str(ct2), "--data-dir", tempfile.gettempdir(), "--local-files-only"),
        *("--stt-library", "faster-whisper", "--language", "en", "--cpu-threads", "2"),
        *("--beam-size", str(beam)),
    ]
    process = LoggedProcess(argv, f"wyoming-faster-whisper-b{beam}", r"Ready", 300)
    for _ in range(100):  # it logs Ready just before it binds
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            break
        except OSError:
            time.sleep(0.1)
    return process, port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrent", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--trailing", type=float, nargs="+", default=[0.7, 0.25])
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=SYSTEMS)
    parser.add_argument(
        "--before", metavar="PATH", help="also a Parley whose package is imported from PATH"
    )
    args = parser.parse_args()
    from parley.weights.bundle import ct2_source

    spoken = {trailing: said(trailing) for trailing in args.trailing}
    ct2 = ct2_source(args.model, Path(tempfile.gettempdir()) / f"parley-ct2-{args.model}")
    rows = []
    systems = args.systems + (["parley auto before"] if args.before else [])
    for system in systems:
        if system.startswith("parley"):
            env = {"PARLEY_ASR__COMPUTE_TYPE": system.split(" ")[1]}
            if system.endswith("before"):
                env["PYTHONPATH"] = args.before
            server = Server(args.model, "off", ["--wyoming-port", "0"], "info", "wyoming", env)
            found = re.search(r"Wyoming on tcp://[\d.]+:(\d+)", server.log_path.read_text())
            assert found is not None, "parley serve did not say its Wyoming port"
            process, port = server, int(found[1])
        else:
            process, port = faster_whisper_server(ct2, int(system.rsplit(" ", 1)[1]))
        try:
            asyncio.run(run(port, spoken[args.trailing[0]][:2], 1))  # warm up: kernels built
            for trailing, commands in spoken.items():
                for concurrent in args.concurrent:
                    row = asyncio.run(run(port, commands, concurrent))
                    rows.append({"system": system, "trailing_s": trailing, **row})
                    print(f"{system}, {trailing} s, {concurrent} at once: done", flush=True)
        finally:
            process.stop()
    columns = [
        "system",
        "trailing_s",
        "concurrent",
        "failed",
        "wer",
        "latency_p50_s",
        "latency_p90_s",
        "latency_max_s",
    ]
    print_table(rows, columns)
    print(write_json("voice-commands", {"model": args.model, "commands": COMMANDS, "rows": rows}))


if __name__ == "__main__":
    main()
