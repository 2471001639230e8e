"""A phone call through /v1/twilio against the same speech on /v1/stream.

pyannote's sample.wav (a real two-person phone conversation) is split by its reference
transcript into the call's two directions (Diane calls, Sheila answers), each sent as
Twilio sends it: 8 kHz mu-law in 20 ms media events, signed, at real time (or faster
with --speed). Results come back through the result webhooks, verified by the
`standardwebhooks` package. The same two tracks are then streamed on /v1/stream at
16 kHz. Per track: WER both ways, and the words in spans where the other speaker talks
over (the mono recording keeps their voice there; a real call's tracks would not).

Usage: python bench/telephony.py [--model tiny.en] [--speed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os

from common import print_table, write_json

from pyannote.database.util import load_rttm

from audio_fixtures import sample_dir, sample_turns, wer
from parley.config import Settings
from test_twilio import call_then_native, sample_call

SPEAKERS = {
    "inbound": ("caller", "Diane", "speaker90"),
    "outbound": ("agent", "Sheila", "speaker91"),
}


def talked_over() -> dict[str, float]:
    """Per track, the seconds of its utterances during which the other speaker talks."""
    reference = load_rttm(str(sample_dir() / "sample.rttm"))["sample"]
    out = {}
    for track, (_, name, label) in SPEAKERS.items():
        total = 0.0
        for turn in sample_turns():
            if turn.voice != name:
                continue
            for segment, _, other in reference.itertracks(yield_label=True):
                if other != label:
                    total += max(0.0, min(turn.end, segment.end) - max(turn.start, segment.start))
        out[track] = total
    return out


async def run(model: str, speed: float) -> list[dict]:
    tracks, said = sample_call()
    models_dir = os.environ.get("PARLEY_MODELS_DIR", str(Settings().models_dir))
    finals, native = await call_then_native(models_dir, tracks, speed, asr={"model": model})
    over = talked_over()
    rows = []
    for track, (speaker, name, _) in SPEAKERS.items():
        heard = " ".join(f["text"] for f in finals if f["speaker"] == speaker)
        rows.append(
            {
                "track": track,
                "speaker": speaker,
                "who": name,
                "words": len(said[track].split()),
                "wer_twilio_8k_mulaw": wer(said[track], heard),
                "wer_native_16k": wer(said[track], native[track]),
                "talked_over_s": over[track],
                "heard": heard,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--speed", type=float, default=1.0, help="times real time")
    args = parser.parse_args()
    rows = asyncio.run(run(args.model, args.speed))
    print_table(
        rows,
        [
            "track",
            "speaker",
            "who",
            "words",
            "wer_twilio_8k_mulaw",
            "wer_native_16k",
            "talked_over_s",
        ],
    )
    path = write_json("telephony", {"model": args.model, "speed": args.speed, "rows": rows})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
