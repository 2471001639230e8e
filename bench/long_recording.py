"""A long recording sent whole: what it costs a server's memory, and how long it takes.

A unit of bench/files.py's recording (sample.wav's two real voices and four espeak-ng
voices in turns, about ``--unit`` minutes) is repeated to each length of ``--minutes``
(whole units, so that the text said is known) and encoded as a 32 kbps mono MP3, as a
podcast or meeting upload comes. For each length and mode, a fresh `parley serve`
(tiny.en, speakers on) is sent it at /v1/audio/transcriptions (`json`: words only;
`diarized_json`: with speakers), and its resident memory is read every half second.
Reports the time, × real time, the resident memory before the upload, its peak during
it and what is left after, the WER and the speakers heard.
Usage: python bench/long_recording.py [--minutes 20 60 120 220] [--modes json diarized_json]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from common import print_table, write_json

import numpy as np

from audio_fixtures import wer, write_wav
from files import recording
from load import Server, upload
from soak import rss_mb

SAMPLE_EVERY_S = 0.5


def mp3_of(audio: np.ndarray, folder: Path) -> Path:
    """``audio`` as a 32 kbps mono MP3 (ffmpeg's LAME), in ``folder``."""
    wav = write_wav(folder / "long.wav", audio)
    mp3 = folder / "long.mp3"
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-i", wav, "-ac", "1", "-b:a", "32k", mp3], check=True
    )
    wav.unlink()
    return mp3


def run(path: Path, speakers: bool, minutes: float) -> dict:
    """One fresh server sent ``path`` once (``speakers``: ``diarized_json``, else
    ``json``): time, memory, the answer's text and speakers."""
    server = Server("tiny.en", "bundle", [], "warning", log_name="long-recording")
    peak = [0.0]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_mb(server.process.pid))
            time.sleep(SAMPLE_EVERY_S)

    try:
        before = rss_mb(server.process.pid)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        took, answer = asyncio.run(upload(server, str(path), speakers))
        done.set()
        watcher.join()
        after = rss_mb(server.process.pid)
    finally:
        done.set()
        server.stop()
    heard = {s["speaker"] for s in answer.get("segments", []) if "speaker" in s}
    return {
        "minutes": round(minutes, 1),
        "mode": "diarized_json" if speakers else "json",
        "seconds": round(took, 1),
        "x_real_time": round(minutes * 60 / took, 1),
        "rss_before_mb": round(before),
        "rss_peak_mb": round(peak[0]),
        "peak_over_before_mb": round(peak[0] - before),
        "rss_after_mb": round(after),
        "text": answer["text"],
        "speakers": len(heard) if speakers else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, nargs="+", default=[20, 60, 120, 220])
    modes = ["json", "diarized_json"]
    parser.add_argument("--modes", nargs="+", choices=modes, default=modes)
    parser.add_argument("--unit", type=float, default=19.5, help="minutes repeated")
    args = parser.parse_args()
    unit, said = recording(args.unit)
    unit_minutes = len(unit) / 16000 / 60
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for minutes in args.minutes:
            copies = max(1, int(minutes // unit_minutes))
            path = mp3_of(np.tile(unit, copies), Path(folder))
            for mode in args.modes:
                row = run(path, mode == "diarized_json", copies * unit_minutes)
                row["wer"] = round(wer(" ".join([said] * copies), row.pop("text")), 3)
                rows.append(row)
                print_table(rows[-1:], list(row))
    columns = list(rows[0])
    print()
    print_table(rows, columns)
    print(f"results: {write_json('long-recording', {'rows': rows, 'unit_minutes': unit_minutes})}")


if __name__ == "__main__":
    main()
