"""Soak: one long session of real speech through a real `parley serve`, watching the
server's memory and whether final latency creeps up as the session grows.

Streams ``--minutes`` of speech (the load bench's conversations, one after another:
sample.wav and espeak turns) in one session at ``--speed`` × real time, and samples
the server's resident memory every few seconds. Reports, for each block of ``--block``
minutes of audio, the memory at its end and its finals' latency (wall time from sending
the audio at a final's end to the final, as bench/load.py times it; read it at
``--speed 1``, real time); then the growth after warm-up (the first ``--warm-up``
minutes), the latency's creep (the last block's p50 against the first's), how long the
session took to end after ``end_of_stream`` (its closing relabel with speakers),
finals, speaker labels, errors and WER. The memory bound the issue set: growth ≤ 50 MB.
Usage: python bench/soak.py [--minutes 10] [--speed 4] [--diarization off|on] [--block 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json

from common import print_table, write_json

import numpy as np
from websockets.asyncio.client import connect

from audio_fixtures import wer
from load import CHUNK_S, Server, conversations, sent_at_end

GROWTH_BOUND_MB = 50.0
SAMPLE_EVERY_S = 2.0


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def long_talk(minutes: float) -> tuple[np.ndarray, str]:
    """At least ``minutes`` of conversation: the load bench's conversations, end to end,
    each whole (so that the reference is the text of the audio)."""
    pieces, texts, total = [], [], 0
    talks = conversations(4)
    while total < minutes * 60 * 16000:
        talk = talks[len(pieces) % len(talks)]
        pieces.append(talk.audio)
        texts.append(talk.reference)
        total += len(talk.audio)
    return np.concatenate(pieces), " ".join(texts)


async def soak(server: Server, audio: np.ndarray, speed: float, diarize: bool) -> dict:
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
    step = int(CHUNK_S * 16000) * 2
    samples: list[tuple[float, float]] = []  # (audio minutes sent, RSS MB)
    text: list[str] = []
    errors: list[dict] = []
    timed: list[tuple[float, float]] = []  # (a final's end in audio minutes, its latency s)
    sent_at: list[float] = []  # wall time each chunk left; chunk k ends at (k + 1) × CHUNK_S
    speakers: set[str] = set()
    updates = 0
    ended_at: float | None = None  # wall time end_of_stream left
    sent_s = 0.0
    loop = asyncio.get_running_loop()

    async def watch() -> None:
        while True:
            samples.append((sent_s / 60, rss_mb(server.process.pid)))
            await asyncio.sleep(SAMPLE_EVERY_S)

    url = server.url + ("?diarization=true&partials=true" if diarize else "?partials=true")
    async with connect(url, max_size=None) as ws:
        await ws.recv()

        async def send() -> None:
            nonlocal sent_s, ended_at
            begin = loop.time()
            for k, i in enumerate(range(0, len(pcm), step)):
                wait = begin + k * CHUNK_S / speed - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                await ws.send(pcm[i : i + step])
                sent_at.append(loop.time())
                sent_s = (i + step) / 2 / 16000
            await ws.send(json.dumps({"type": "end_of_stream"}))
            ended_at = loop.time()

        watcher = asyncio.create_task(watch())
        sender = asyncio.create_task(send())
        finals = 0
        async for raw in ws:
            message = json.loads(raw)
            if message["type"] == "final":
                finals += 1
                text.append(message["text"])
                speakers.add(message.get("speaker") or "")
                if message["reason"] != "end_of_stream":  # that one waits for the client's end
                    late = loop.time() - sent_at_end(sent_at, message["end"])
                    timed.append((message["end"] / 60, late))
            elif message["type"] == "speaker_update":
                updates += 1
                speakers.add(message.get("speaker") or "")
            elif message["type"] == "error":
                errors.append(message)
            elif message["type"] == "session_ended":
                break
        closed_in = loop.time() - ended_at if ended_at is not None else None
        await sender
        watcher.cancel()
    samples.append((sent_s / 60, rss_mb(server.process.pid)))
    return {
        "samples": samples,
        "finals": finals,
        "errors": errors,
        "text": " ".join(text),
        "latencies": timed,
        "speaker_updates": updates,
        "labels": sorted(speakers - {""}),
        "ended_in_s": closed_in,
    }


def blocks(run: dict, minutes: float, block: float) -> list[dict]:
    """Each block of ``block`` audio minutes: its finals' latency and the memory at its end."""
    rows = []
    start = 0.0
    while start < minutes - 1e-9:
        end = min(start + block, minutes)
        late = [t for at, t in run["latencies"] if start <= at < end]
        near = min(run["samples"], key=lambda s: abs(s[0] - end))
        rows.append(
            {
                "audio_minutes": f"{start:g}-{end:g}",
                "finals": len(late),
                "latency_p50_s": round(float(np.percentile(late, 50)), 3) if late else None,
                "latency_p90_s": round(float(np.percentile(late, 90)), 3) if late else None,
                "latency_max_s": round(max(late), 3) if late else None,
                "rss_mb": round(near[1], 1),
            }
        )
        start = end
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--speed", type=float, default=4.0, help="× real time")
    parser.add_argument("--warm-up", type=float, default=1.0, help="minutes of audio")
    parser.add_argument("--diarization", choices=["off", "on"], default="off")
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--block", type=float, default=1.0, help="minutes of audio a row")
    args = parser.parse_args()
    audio, reference = long_talk(args.minutes)
    minutes = round(len(audio) / 16000 / 60, 2)
    server = Server(
        args.model, "bundle" if args.diarization == "on" else "off", [], "warning", log_name="soak"
    )
    try:
        started_mb = rss_mb(server.process.pid)
        run = asyncio.run(soak(server, audio, args.speed, args.diarization == "on"))
    finally:
        server.stop()
    samples = run["samples"]
    after_warm_up = next(mb for minute, mb in samples if minute >= args.warm_up)
    rows = blocks(run, minutes, args.block)
    print_table(rows, list(rows[0]))
    growth = samples[-1][1] - after_warm_up
    peak_growth = max(mb for minute, mb in samples if minute >= args.warm_up) - after_warm_up
    timed = [row for row in rows if row["latency_p50_s"] is not None]
    summary = {
        "minutes": minutes,
        "speed": args.speed,
        "diarization": args.diarization,
        "rss_at_start_mb": started_mb,
        "rss_after_warm_up_mb": after_warm_up,
        "rss_end_mb": samples[-1][1],
        "growth_after_warm_up_mb": growth,
        "peak_growth_after_warm_up_mb": peak_growth,
        "latency_creep_p50_s": (
            round(timed[-1]["latency_p50_s"] - timed[0]["latency_p50_s"], 3) if timed else None
        ),
        "ended_in_s": round(run["ended_in_s"], 2) if run["ended_in_s"] is not None else None,
        "finals": run["finals"],
        "labels": len(run["labels"]),
        "speaker_updates": run["speaker_updates"],
        "errors": len(run["errors"]),
        "wer": wer(reference, run["text"]),
        "holds": peak_growth <= GROWTH_BOUND_MB and not run["errors"],
    }
    print()
    print_table([summary], list(summary))
    path = write_json(
        "soak",
        {
            **summary,
            "blocks": rows,
            "samples": [[round(m, 3), round(mb, 1)] for m, mb in samples],
            "latencies": [[round(m, 3), round(t, 3)] for m, t in run["latencies"]],
        },
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
