"""Serving capacity: N concurrent real-time streams against a real `parley serve` on loopback.

Each stream is a conversation of about 67 s and four voices: pyannote's sample.wav (two
speakers) and an espeak-ng dialogue of two voices, rotated differently per stream
(independent callers do not take their turns in step), sent in 100 ms PCM16 messages
paced by the clock; stream i starts ``i × --stagger`` seconds after the first. ``--same-audio
--stagger 0`` sends every stream the same conversation at once: the worst case.

For each N it reports: final latency (wall time from sending the audio at a final's
``end`` to receiving that final) p50 / p95 / max, finals lost (segments without a
final), partials per session-second, ASR busy fraction (from /health, where the
server reports it) and server CPU use, WER against the known text, and (labels on) the
speakers each stream shows. Then the largest N that holds p50 ≤ 1.5 s and max ≤ 3 s,
with diarization off and on.

With ``--upload-minutes M`` each count runs twice, without and then with a recording of
M minutes POSTed to /v1/audio/transcriptions as the streams start (background work:
what it costs the live streams' final latency), and the upload's own time is reported;
``--upload-speakers`` asks for its speakers too (``diarized_json``; labels on only).

The server runs in its own process (as deployed), so the clients' work is not on its
event loop. Usage: python bench/load.py [--streams 1 2 4 6 8] [--diarization off on]
[--upload-minutes 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import ParleyProcess, print_table, write_json

import numpy as np
from websockets.asyncio.client import connect

from audio_fixtures import (
    DIALOGUE_LINES,
    SAMPLE_WAV,
    SPEAKERS,
    conversation,
    read_wav,
    sample_reference_text,
    silence,
    wer,
)
from parley.client.transcript import Transcript
from parley.protocol.messages import parse

CHUNK_S = 0.1
VOICES = 4  # in each conversation: sample.wav's two speakers and two espeak-ng voices
P50_BOUND_S = 1.5
MAX_BOUND_S = 3.0


@dataclass(frozen=True)
class Conversation:
    audio: np.ndarray
    reference: str


def conversations(count: int) -> list[Conversation]:
    """``count`` four-voice conversations of 68 to 73 s, each its own rotation of the
    same pieces (sample.wav, then eight espeak turns of two voices) after its own lead
    silence, so that the turns of different streams do not end at the same moment."""
    pieces = [(read_wav(SAMPLE_WAV), sample_reference_text())]
    voices = [SPEAKERS["A"], SPEAKERS["B"]]
    for k, line in enumerate(DIALOGUE_LINES):
        spoken, truth = conversation([(voices[k % 2], line)], gap_s=0.6, lead_s=0.0)
        pieces.append((spoken, truth[0].text))
    made = []
    for i in range(count):
        first = i * len(pieces) // count
        order = pieces[first:] + pieces[:first]
        lead = 0.5 + (1.7 * i) % 5.0  # nor do they all begin (or end) speaking at once
        audio = np.concatenate([silence(lead)] + [a for a, _ in order] + [silence(1.0)])
        made.append(Conversation(audio.astype(np.float32), " ".join(t for _, t in order)))
    return made


@dataclass
class StreamOutcome:
    latencies: list[float] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # each latency's final's reason
    spans: list[tuple[float, float]] = field(default_factory=list)  # each one's start, end
    partials: int = 0
    finals: int = 0
    segments: int | None = None
    errors: list[dict] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    close_code: int | None = None
    transcript: Transcript = field(default_factory=Transcript)
    refused_in_s: float | None = None  # refused as busy (server_busy): how soon


def sent_at_end(sent_at: list[float], end: float) -> float:
    """When the chunk holding stream time ``end`` was sent (``sent_at``: each chunk's wall
    time, chunk k ending at (k + 1) × CHUNK_S): a final's latency runs from there."""
    chunk = min(int(np.ceil(end / CHUNK_S - 1e-6)) - 1, len(sent_at) - 1)
    return sent_at[max(chunk, 0)]


async def stream(url: str, talk: Conversation, delay: float) -> StreamOutcome:
    """Send one conversation in real time; time every final from its end's audio."""
    await asyncio.sleep(delay)
    outcome = StreamOutcome()
    pcm = (np.clip(talk.audio, -1, 1) * 32767).astype("<i2").tobytes()
    step = int(16000 * CHUNK_S) * 2
    sent_at: list[float] = []  # wall time each chunk left, chunk k ends at (k + 1) × CHUNK_S
    loop = asyncio.get_running_loop()
    asked = loop.time()
    async with connect(url, max_size=None, compression=None, open_timeout=60) as ws:
        started = json.loads(await ws.recv())
        if started.get("code") == "server_busy":
            outcome.refused_in_s = loop.time() - asked
            return outcome
        if started["type"] != "session_started":
            outcome.errors.append(started)
            return outcome

        async def send() -> None:
            begin = loop.time()
            for k, i in enumerate(range(0, len(pcm), step)):
                wait = begin + k * CHUNK_S - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                await ws.send(pcm[i : i + step])
                sent_at.append(loop.time())
            await ws.send(json.dumps({"type": "end_of_stream"}))

        sender = asyncio.create_task(send())
        async for raw in ws:
            message = json.loads(raw)
            kind = message["type"]
            typed = parse(message)
            if typed is not None:
                outcome.transcript.apply(typed)
            if kind == "partial":
                outcome.partials += 1
            elif kind == "final":
                outcome.finals += 1
                outcome.text.append(message["text"])
                if message["reason"] != "end_of_stream":  # that one waits for the client's end
                    outcome.latencies.append(loop.time() - sent_at_end(sent_at, message["end"]))
                    outcome.reasons.append(message["reason"])
                    outcome.spans.append((message["start"], message["end"]))
            elif kind == "error":
                outcome.errors.append(message)
            elif kind == "session_ended":
                outcome.segments = message["segments"]
                break
        await sender
        await ws.wait_closed()
        outcome.close_code = ws.close_code
    return outcome


class Server(ParleyProcess):
    """`parley serve` in a child process on a free loopback port; its log goes to a file."""

    def __init__(
        self,
        model: str,
        diarization: str,
        extra: list[str],
        log_level: str,
        log_name: str = "load",
        env: dict[str, str] | None = None,
    ):
        super().__init__(
            [
                sys.executable,
                "-m",
                "parley",
                "serve",
                "--port",
                "0",
                "--model",
                model,
                "--diarization",
                diarization,
                "--max-sessions",
                "64",
                *extra,
            ],
            f"{log_name}-server-{diarization}",
            r"ws://([\d.]+):(\d+)/v1/stream",
            300,
            {"PARLEY_LOG_LEVEL": log_level, **(env or {})},
        )
        self.base = f"{self.ready[1]}:{self.ready[2]}"

    def cpu_seconds(self) -> float:
        fields = open(f"/proc/{self.process.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _asr_busy_seconds(health: dict) -> float | None:
    return health.get("asr", {}).get("busy_seconds")


async def upload(server: Server, path: str, speakers: bool = False) -> tuple[float, dict]:
    """POST a recording to the server's OpenAI file endpoint (``speakers``: with them,
    ``diarized_json``); seconds until the answer, and the answer."""
    import httpx

    began = time.perf_counter()
    async with httpx.AsyncClient(timeout=3600) as client:
        content = await asyncio.to_thread(Path(path).read_bytes)
        response = await client.post(
            f"http://{server.base}/v1/audio/transcriptions",
            files={"file": ("upload.wav", content)},
            data={"response_format": "diarized_json"} if speakers else {},
        )
    response.raise_for_status()
    return time.perf_counter() - began, response.json()


async def run_streams(
    server: Server,
    count: int,
    stagger: float,
    diarize: bool,
    talks: list[Conversation],
    upload_path: str | None = None,
    upload_speakers: bool = False,
) -> dict:
    query = "?diarization=true" if diarize else ""
    before_health, before_cpu, began = server.health(), server.cpu_seconds(), time.perf_counter()
    uploading = (
        asyncio.ensure_future(upload(server, upload_path, upload_speakers)) if upload_path else None
    )
    outcomes = await asyncio.gather(
        *(stream(server.url + query, talks[i], i * stagger) for i in range(count))
    )
    wall = time.perf_counter() - began
    upload_s = (await uploading)[0] if uploading is not None else None  # done before the next run
    after_health, after_cpu = server.health(), server.cpu_seconds()
    refusals = [o.refused_in_s for o in outcomes if o.refused_in_s is not None]
    admitted = [(o, talks[i]) for i, o in enumerate(outcomes) if o.refused_in_s is None]
    outcomes, talks = [o for o, _ in admitted], [t for _, t in admitted]
    latencies = sorted(t for o in outcomes for t in o.latencies)
    rates = [o.partials / (len(talks[i].audio) / 16000) for i, o in enumerate(outcomes)]
    audio_s = sum(len(talk.audio) for talk in talks) / 16000 or 1.0
    busy = _asr_busy_seconds(after_health)
    lost = sum(max(0, (o.segments or 0) - o.finals) for o in outcomes)
    errors = [e for o in outcomes for e in o.errors]
    counts = [len(o.transcript.speakers()) for o in outcomes] if diarize else None
    return {
        "streams": count,
        "admitted": len(outcomes),
        "refused": len(refusals),
        "refused_within_s": max(refusals) if refusals else None,
        # real-time streams the server said it carries, before and after this run
        "capacity_before": _carried(before_health),
        "capacity_after": _carried(after_health),
        "diarization": diarize,
        "upload": upload_path is not None,
        "upload_speakers": upload_speakers,
        "upload_s": upload_s,
        "finals": len(latencies),
        "p50_s": statistics.median(latencies) if latencies else None,
        "p95_s": float(np.percentile(latencies, 95)) if latencies else None,
        "max_s": latencies[-1] if latencies else None,
        "finals_lost": lost,
        "errors": len(errors),
        "partials_per_session_s": sum(o.partials for o in outcomes) / audio_s,
        # fairness: the least and most partials any one stream got, per second of its audio
        "partials_min_max": [round(min(rates), 3), round(max(rates), 3)],
        "asr_busy": (busy - _asr_busy_seconds(before_health)) / wall if busy is not None else None,
        "server_cpu": (after_cpu - before_cpu) / wall / os.cpu_count(),
        "wer": statistics.fmean(
            wer(talks[i].reference, " ".join(o.text)) for i, o in enumerate(outcomes)
        ),
        # with labels on: how many speakers each stream's transcript shows, and how many
        # streams show all VOICES
        "speaker_counts": counts,
        "right_speakers": None if counts is None else counts.count(VOICES),
        "error_codes": sorted({e.get("code") for e in errors}),
        "latencies_s": [round(t, 3) for t in latencies],
        # why the late finals were cut where they were: the largest latency of each reason
        "max_by_reason_s": {r: v[-1] for r, v in _by_reason(outcomes).items()},
        "latencies_by_reason_s": _by_reason(outcomes),
        "latest_finals": _latest(outcomes),
    }


def _latest(outcomes: list[StreamOutcome], kept: int = 10) -> list[dict]:
    """The latest finals, with their streams and spans: which segments came late."""
    finals = [
        {"stream": i, "start": start, "end": end, "reason": reason, "latency_s": round(t, 3)}
        for i, o in enumerate(outcomes)
        for t, reason, (start, end) in zip(o.latencies, o.reasons, o.spans)
    ]
    return sorted(finals, key=lambda f: -f["latency_s"])[:kept]


def _by_reason(outcomes: list[StreamOutcome]) -> dict[str, list[float]]:
    latencies: dict[str, list[float]] = {}
    for o in outcomes:
        for reason, latency in zip(o.reasons, o.latencies):
            latencies.setdefault(reason, []).append(round(latency, 3))
    return {reason: sorted(values) for reason, values in latencies.items()}


def _carried(health: dict) -> dict | None:
    capacity = health.get("capacity")
    return None if capacity is None else capacity["streams"]


def holds(row: dict) -> bool:
    return (
        row["p50_s"] is not None
        and row["p50_s"] <= P50_BOUND_S
        and row["max_s"] <= MAX_BOUND_S
        and row["finals_lost"] == 0
        and row["errors"] == 0
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 2, 4, 6, 8])
    parser.add_argument("--diarization", nargs="+", choices=["off", "on"], default=["off", "on"])
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument(
        "--stagger",
        type=float,
        default=0.5,
        help="seconds between the starts of consecutive streams",
    )
    parser.add_argument(
        "--same-audio",
        action="store_true",
        help="every stream sends the same conversation (with --stagger 0: "
        "all finals fall due at once, the worst case)",
    )
    parser.add_argument("--label", default="", help="a name for this run in the JSON")
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="extra argument for `parley serve` (repeatable)",
    )
    parser.add_argument(
        "--server-pythonpath",
        help="run the server from this source tree (e.g. an older checkout, for a before)",
    )
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment of the server, e.g. PARLEY_DIARIZATION__STEP_S=1.0",
    )
    parser.add_argument(
        "--upload-minutes",
        type=float,
        help="also run each count while a "
        "recording this long is POSTed to /v1/audio/transcriptions at the "
        "start (without and with, in turn), to see what files cost streams",
    )
    parser.add_argument(
        "--upload-speakers",
        action="store_true",
        help="the upload asks for its speakers (diarized_json; with --diarization on only)",
    )
    parser.add_argument(
        "--server-log-level",
        default="warning",
        help="the server's log level (its log: bench/results/load-server-*.log)",
    )
    args = parser.parse_args()
    talks = conversations(1 if args.same_audio else max(args.streams))
    talks = talks * (max(args.streams) if args.same_audio else 1)
    upload_path = None
    if args.upload_minutes:
        import tempfile

        from audio_fixtures import write_wav
        from files import recording

        upload_path = str(
            write_wav(Path(tempfile.mkdtemp()) / "upload.wav", recording(args.upload_minutes)[0])
        )
    rows = []
    for mode in args.diarization:
        env = dict(item.split("=", 1) for item in args.server_env)
        if args.server_pythonpath:
            env["PYTHONPATH"] = args.server_pythonpath
        server = Server(
            args.model,
            "bundle" if mode == "on" else "off",
            args.server_arg,
            args.server_log_level,
            env=env,
        )
        try:
            for count in args.streams:
                for path in [None, upload_path] if upload_path else [None]:
                    row = asyncio.run(
                        run_streams(
                            server,
                            count,
                            args.stagger,
                            mode == "on",
                            talks,
                            path,
                            args.upload_speakers and mode == "on",
                        )
                    )
                    rows.append(row)
                    print(
                        f"{count} streams, diarization {mode}, upload {path is not None}: "
                        f"p50 {row['p50_s']:.2f} s, max {row['max_s']:.2f} s",
                        flush=True,
                    )
        finally:
            server.stop()
    print()
    print_table(
        rows,
        [
            "streams",
            "admitted",
            "refused",
            "refused_within_s",
            "diarization",
            "upload",
            "upload_s",
            "finals",
            "p50_s",
            "p95_s",
            "max_s",
            "finals_lost",
            "errors",
            "partials_per_session_s",
            "partials_min_max",
            "asr_busy",
            "server_cpu",
            "wer",
            "right_speakers",
            "max_by_reason_s",
        ],
    )
    best = {}
    for mode in args.diarization:
        held = [
            r["admitted"]
            for r in rows
            if r["diarization"] == (mode == "on") and not r["upload"] and holds(r)
        ]
        best[mode] = max(held, default=0)
        print(
            f"diarization {mode}: most admitted streams with p50 ≤ {P50_BOUND_S} s and max ≤ "
            f"{MAX_BOUND_S} s: {best[mode]}"
        )
    path = write_json(
        "load",
        {
            "label": args.label,
            "model": args.model,
            "stagger_s": args.stagger,
            "same_audio": args.same_audio,
            "rows": rows,
            "most_streams": best,
        },
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
