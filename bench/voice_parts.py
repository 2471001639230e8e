"""Two voices in one segment: decoded whole, a voice at a time, or as the server does:
whole, then again a voice at a time where a voice was dropped (sessions/voice_parts.py).

A final whose segment was left uncut at a speaker change (found too late to cut) holds
two voices. Each ordered pair of seven espeak-ng voices says two dialogue lines back to
back, without espeak-ng's own pauses (0.3 s of silence either end), and the segment goes
through the real scheduler three times: as one request; split at the change (at the
quietest frame near it, as the server splits it) into one request a voice, the results
joined; and as the server decodes a segment left uncut (``decode_by_voice``). Reported:
WER of each way, the pairs where one way's WER is over another's by more than 0.2 (a
line lost), how often the server's way decoded again, and the seconds each way took (the
parts pay an encoder pass each).

Usage: python bench/voice_parts.py [--model tiny.en]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import time

from common import engine_plan, print_table, write_json

import numpy as np

from audio_fixtures import (
    DIALOGUE_LINES,
    MONOLOGUE_LINES,
    SPEAKERS,
    audible_span,
    speak,
    wer,
)
from parley.config import default_models_dir
from parley.core.asr import AsrRequest
from parley.core.audio import SAMPLE_RATE
from parley.core.vad import CloseReason, SegmentClosed
from parley.models.whisper_engine import WhisperEngine
from parley.sessions.voice_parts import decode_by_voice, decode_parts, voice_parts
from parley.weights.bundle import resolve_model
from parley.workers.scheduler import AsrScheduler

VOICES = (*SPEAKERS.values(), "en-us", "en-us+f3", "en-gb-x-rp", "en-us+m3:30")
LINES = DIALOGUE_LINES + MONOLOGUE_LINES[:6]
PAD_S = 0.3
FRAME_S = 0.03  # the VAD's frame
SEARCH_S = 0.25  # how far from the change the split may move (TurnConfig.cut_search_s)
LOST = 0.2  # one way's WER over another's by more than this: a line lost
WAYS = ("whole", "parts", "server")


def voiced(text: str, voice: str) -> np.ndarray:
    speech = speak(text, voice)
    start, end = audible_span(speech)
    return speech[int(start * SAMPLE_RATE) : int(end * SAMPLE_RATE)]


async def measure(engine: WhisperEngine) -> list[dict]:
    scheduler = AsrScheduler(engine, capacity=4)
    await scheduler.start()
    rows = []
    try:
        for k, (first_voice, second_voice) in enumerate(itertools.permutations(VOICES, 2)):
            lines = LINES[k % len(LINES)], LINES[(k + 3) % len(LINES)]
            first, second = voiced(lines[0], first_voice), voiced(lines[1], second_voice)
            pad = np.zeros(int(PAD_S * SAMPLE_RATE), np.float32)
            audio = np.concatenate([pad, first, second, pad])
            frames = -(-len(audio) // int(FRAME_S * SAMPLE_RATE))
            segment = SegmentClosed(
                k, 0.0, len(audio) / SAMPLE_RATE, audio, CloseReason.SILENCE,
                np.ones(frames, bool), FRAME_S,
            )  # fmt: skip
            change = (len(pad) + len(first)) / SAMPLE_RATE
            row: dict = {"voices": f"{first_voice} → {second_voice}"}
            parts = voice_parts(segment, [change], SEARCH_S)
            for way in WAYS:
                began = time.perf_counter()
                request = AsrRequest(audio, with_words=True)
                if way == "parts":
                    result = await decode_parts(scheduler, request, parts, False)
                else:
                    future = (
                        await decode_by_voice(scheduler, request, segment, parts, False)
                        if way == "server"
                        else await scheduler.submit_final(request, False)
                    )
                    result = await asyncio.wrap_future(future)
                row[f"{way}_s"] = time.perf_counter() - began
                row[f"{way}_wer"] = wer(" ".join(lines), result.text)
                row[f"{way}_text"] = result.text
            row["decoded_again"] = row["server_text"] != row["whole_text"]
            rows.append(row)
            print(
                f"{row['voices']:>40}  " + "  ".join(f"{row[f'{w}_wer']:.3f}" for w in WAYS),
                flush=True,
            )
    finally:
        await scheduler.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="tiny.en")
    args = parser.parse_args()
    engine = WhisperEngine(
        resolve_model(args.model, default_models_dir()), args.model, engine_plan()
    )
    rows = asyncio.run(measure(engine))
    summary = [
        {
            "model": args.model,
            "pairs": len(rows),
            "decoded": way,
            "wer_mean": statistics.fmean(r[f"{way}_wer"] for r in rows),
            "worse_by_0.2": sum(
                any(r[f"{way}_wer"] - r[f"{other}_wer"] > LOST for other in WAYS) for r in rows
            ),
            "decoded_again": sum(r["decoded_again"] for r in rows) if way == "server" else None,
            "seconds_mean": statistics.fmean(r[f"{way}_s"] for r in rows),
        }
        for way in WAYS
    ]
    for row in summary:
        row["seconds_ratio"] = row["seconds_mean"] / summary[0]["seconds_mean"]
    print()
    columns = ["model", "pairs", "decoded", "wer_mean", "worse_by_0.2", "decoded_again"]
    print_table(summary, [*columns, "seconds_mean", "seconds_ratio"])
    print(f"\nwrote {write_json('voice-parts', {'summary': summary, 'rows': rows})}")


if __name__ == "__main__":
    main()
