"""End-to-end streaming on sample.wav through an in-process session (no socket).

Measures, per model: word error rate against sample.stm, the ASR worker's real-time
factor (decode seconds / audio seconds), and the delay from the end of each final's
last word (as fed, in real time) to the final being ready, plus the same for
partials. Usage: python bench/stream.py [--models tiny.en base] [--fast]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import statistics
import time

from common import engine_plan, print_table, write_json

from audio_fixtures import SAMPLE_WAV, read_wav, sample_reference_text, wer
from parley.config import Settings
from parley.core.vad import VadConfig
from parley.models.whisper_engine import WhisperEngine
from parley.protocol.messages import Final, Partial, StreamConfig
from parley.sessions.session import Session
from parley.sessions.session_options import SessionOptions
from parley.weights.bundle import resolve_model
from parley.workers.scheduler import AsrScheduler

CHUNK_S = 0.1


async def stream_once(engine: WhisperEngine, audio, realtime: bool, partial_interval: float):
    worker = AsrScheduler(engine, capacity=16)
    await worker.start()
    session = Session(
        StreamConfig(), worker, SessionOptions(VadConfig(), partial_interval_s=partial_interval)
    )
    fed_until: list[float] = []  # stream time fed so far, per chunk
    fed_at: list[float] = []  # wall time that chunk went in
    received: list[tuple[float, object]] = []
    loop = asyncio.get_running_loop()

    async def feed():
        step = int(CHUNK_S * 16000)
        start = loop.time()
        for n, i in enumerate(range(0, len(audio), step)):
            if realtime:
                await asyncio.sleep(max(0.0, start + n * CHUNK_S - loop.time()))
            await session.feed_audio(audio[i : i + step])
            fed_until.append(min(len(audio), i + step) / 16000)
            fed_at.append(time.perf_counter())
        await session.end()

    async def read():
        async for message in session.messages():
            received.append((time.perf_counter(), message))

    began = time.perf_counter()
    await asyncio.gather(feed(), read())
    wall = time.perf_counter() - began
    await worker.stop()

    def wall_time_of(stream_t: float) -> float:
        return fed_at[min(bisect.bisect_left(fed_until, stream_t - 1e-9), len(fed_at) - 1)]

    finals = [(t, m) for t, m in received if isinstance(m, Final)]
    partials = [(t, m) for t, m in received if isinstance(m, Partial)]
    final_delays = [t - wall_time_of(m.words[-1].end if m.words else m.end) for t, m in finals]
    partial_delays = [t - wall_time_of(m.end) for t, m in partials]
    hypothesis = " ".join(m.text for _, m in finals)
    return {
        "wer": wer(sample_reference_text(), hypothesis),
        "audio_s": len(audio) / 16000,
        "wall_s": wall,
        "asr_rtf": worker.stats.busy_seconds / (len(audio) / 16000),
        "finals": len(finals),
        "partials": len(partials),
        "final_delay_mean_s": statistics.fmean(final_delays) if final_delays else None,
        "final_delay_max_s": max(final_delays, default=None),
        "partial_delay_mean_s": statistics.fmean(partial_delays) if partial_delays else None,
        "text": hypothesis,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="+", default=["tiny.en", "base"])
    parser.add_argument("--fast", action="store_true", help="feed as fast as possible")
    parser.add_argument("--partial-interval", type=float, default=1.0)
    args = parser.parse_args()
    audio = read_wav(SAMPLE_WAV)
    rows = []
    for name in args.models:
        engine = WhisperEngine(
            resolve_model(name, Settings().models_dir), name, engine_plan("auto")
        )
        row = asyncio.run(stream_once(engine, audio, not args.fast, args.partial_interval))
        rows.append({"model": name, "mode": "fast" if args.fast else "realtime", **row})
    print_table(
        rows,
        [
            "model",
            "mode",
            "wer",
            "asr_rtf",
            "wall_s",
            "finals",
            "partials",
            "final_delay_mean_s",
            "final_delay_max_s",
            "partial_delay_mean_s",
        ],
    )
    path = write_json("stream", {"audio": str(SAMPLE_WAV), "rows": rows})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
