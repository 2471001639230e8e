"""Start-up: how long `parley serve` takes to listen, the CPU it spends getting there,
and its resident memory once listening, with speaker labels off and on.

Each server is started, timed from launch to the log line that gives its stream URL,
measured from /proc, and stopped; the variants take turns (``--repeats`` rounds), so a
busy moment of this shared machine falls on each alike. ``--code LABEL=DIR`` adds the
server found at DIR (a checkout's ``server/`` folder, put first on the child's
PYTHONPATH) as a variant: the code before a change beside the code after it.

Usage: python bench/startup.py [--repeats 3] [--code before=/tmp/w/before/server]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from common import print_table, write_json

from load import Server


def _resident_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def start_once(model: str, diarization: str, pythonpath: str | None) -> dict:
    env = {"PYTHONPATH": pythonpath} if pythonpath else {}
    began = time.perf_counter()
    server = Server(model, diarization, [], "warning", log_name="startup", env=env)
    seconds = time.perf_counter() - began
    try:
        return {
            "seconds": seconds,
            "cpu_seconds": server.cpu_seconds(),
            "resident_mb": _resident_mb(server.process.pid),
        }
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--code", action="append", default=[], help="LABEL=DIR")
    args = parser.parse_args()
    codes: list[tuple[str, str | None]] = [("this checkout", None)]
    codes += [(spec.split("=", 1)[0], os.path.abspath(spec.split("=", 1)[1])) for spec in args.code]
    variants = [(label, path, d) for d in ("off", "bundle") for label, path in codes]
    runs: dict[tuple[str, str], list[dict]] = {(label, d): [] for label, _, d in variants}
    for _ in range(args.repeats):
        for label, path, diarization in variants:
            runs[label, diarization].append(start_once(args.model, diarization, path))
    rows = []
    for (label, diarization), measured in runs.items():
        rows.append(
            {
                "code": label,
                "diarization": diarization,
                "runs": len(measured),
                "seconds_median": statistics.median(m["seconds"] for m in measured),
                "cpu_seconds_median": statistics.median(m["cpu_seconds"] for m in measured),
                "resident_mb_median": statistics.median(m["resident_mb"] for m in measured),
                "runs_measured": measured,
            }
        )
    print_table(
        rows,
        [
            "code",
            "diarization",
            "runs",
            "seconds_median",
            "cpu_seconds_median",
            "resident_mb_median",
        ],
    )
    print(f"wrote {write_json('startup', {'model': args.model, 'rows': rows})}")


if __name__ == "__main__":
    main()
