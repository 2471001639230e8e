"""Soak: one long session of real speech through a real `parley serve`, faster than real
time, watching the server's memory.

Streams ``--minutes`` of speech (the load bench's conversations, one after another:
sample.wav and espeak turns) in one session at ``--speed`` × real time, and samples
the server's resident memory every few seconds. Reports the memory curve by minute of
audio, the growth after warm-up (the first ``--warm-up`` minutes), finals, errors and
WER. The bound the issue set: growth ≤ 50 MB.
Usage: python bench/soak.py [--minutes 10] [--speed 4] [--diarization off|on]
"""

from __future__ import annotations

import argparse
import asyncio
import json

from common import print_table, write_json

import numpy as np
from websockets.asyncio.client import connect

from audio_fixtures import wer
from load import Server, conversations

CHUNK_S = 0.1
GROWTH_BOUND_MB = 50.0
SAMPLE_EVERY_S = 2.0


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def long_talk(minutes: float) -> tuple[np.ndarray, str]:
    """``minutes`` of conversation: the load bench's conversations, end to end."""
    pieces, texts, total = [], [], 0
    talks = conversations(4)
    while total < minutes * 60 * 16000:
        talk = talks[len(pieces) % len(talks)]
        pieces.append(talk.audio)
        texts.append(talk.reference)
        total += len(talk.audio)
    return np.concatenate(pieces)[: int(minutes * 60 * 16000)], " ".join(texts)


async def soak(server: Server, audio: np.ndarray, speed: float, diarize: bool) -> dict:
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
    step = int(CHUNK_S * 16000) * 2
    samples: list[tuple[float, float]] = []  # (audio minutes sent, RSS MB)
    text: list[str] = []
    errors: list[dict] = []
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
            nonlocal sent_s
            begin = loop.time()
            for k, i in enumerate(range(0, len(pcm), step)):
                wait = begin + k * CHUNK_S / speed - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                await ws.send(pcm[i : i + step])
                sent_s = (i + step) / 2 / 16000
            await ws.send(json.dumps({"type": "end_of_stream"}))

        watcher = asyncio.create_task(watch())
        sender = asyncio.create_task(send())
        finals = 0
        async for raw in ws:
            message = json.loads(raw)
            if message["type"] == "final":
                finals += 1
                text.append(message["text"])
            elif message["type"] == "error":
                errors.append(message)
            elif message["type"] == "session_ended":
                break
        await sender
        watcher.cancel()
    samples.append((sent_s / 60, rss_mb(server.process.pid)))
    return {"samples": samples, "finals": finals, "errors": errors, "text": " ".join(text)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--speed", type=float, default=4.0, help="× real time")
    parser.add_argument("--warm-up", type=float, default=1.0, help="minutes of audio")
    parser.add_argument("--diarization", choices=["off", "on"], default="off")
    parser.add_argument("--model", default="tiny.en")
    args = parser.parse_args()
    audio, reference = long_talk(args.minutes)
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
    rows = []
    for minute in range(int(args.minutes) + 1):
        near = min(samples, key=lambda s: abs(s[0] - minute))
        rows.append({"audio_minute": minute, "rss_mb": near[1]})
    growth = samples[-1][1] - after_warm_up
    peak_growth = max(mb for minute, mb in samples if minute >= args.warm_up) - after_warm_up
    print_table(rows, ["audio_minute", "rss_mb"])
    summary = {
        "minutes": args.minutes,
        "speed": args.speed,
        "diarization": args.diarization,
        "rss_at_start_mb": started_mb,
        "rss_after_warm_up_mb": after_warm_up,
        "rss_end_mb": samples[-1][1],
        "growth_after_warm_up_mb": growth,
        "peak_growth_after_warm_up_mb": peak_growth,
        "finals": run["finals"],
        "errors": len(run["errors"]),
        "wer": wer(reference, run["text"]),
        "holds": peak_growth <= GROWTH_BOUND_MB and not run["errors"],
    }
    print()
    print_table([summary], list(summary))
    path = write_json(
        "soak",
        {**summary, "curve": rows, "samples": [[round(m, 3), round(mb, 1)] for m, mb in samples]},
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
