"""Shared bits of the benchmarks: a results table on stdout and JSON under bench/results/."""

from __future__ import annotations

import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CHANGE_TOLERANCE_S = 0.5  # a speaker-change cut this near a true change is right
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT / "tests"))  # the test suite's audio fixtures


def machine() -> dict:
    import torch

    return {
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
        "platform": platform.platform(),
    }


def engine_plan(device: str = "cpu"):
    """The device plan of a bench's in-process engine: the server's own compute type
    (``PARLEY_ASR__COMPUTE_TYPE``, else ``auto``), so that one variable sets it for the
    in-process benches and the servers the others start alike."""
    from parley.config import Settings
    from parley.models.device import plan_device

    return plan_device(device, Settings().asr.compute_type)


def print_table(rows: list[dict], columns: list[str]) -> None:
    if not rows:
        return
    widths = {c: max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    print("  ".join("-" * widths[c] for c in columns))
    for r in rows:
        print("  ".join(_fmt(r.get(c)).ljust(widths[c]) for c in columns))


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return "" if value is None else str(value)


def write_json(name: str, payload: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2) + "\n")
    return path


class LoggedProcess:
    """A child process whose output goes to bench/results/<name>.log; the constructor
    returns once that log matches ``ready`` (kept as ``self.ready``), and raises if the
    process exits or ``timeout_s`` passes first."""

    def __init__(
        self,
        argv: list[str],
        name: str,
        ready: str,
        timeout_s: float,
        env: dict[str, str] | None = None,
        **popen,
    ):
        RESULTS.mkdir(parents=True, exist_ok=True)
        self.log_path = RESULTS / f"{name}.log"
        self._log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYANNOTE_METRICS_ENABLED": "false", **(env or {})},
            **popen,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.process.poll() is None:
            found = re.search(ready, self.log_path.read_text())
            if found:
                self.ready = found
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{name} did not start; see {self.log_path}")

    def stop(self, sig: int = signal.SIGTERM, wait_s: float = 30) -> None:
        self.process.send_signal(sig)
        try:
            self.process.wait(wait_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._log.close()


def labelled_words(base: str, path: Path) -> list[dict]:
    """The words of the recording at ``path`` sent whole to the server at ``base``
    (host:port) through Deepgram's pre-recorded wire with ``diarize=true``: each with
    ``punctuated_word``, ``start``, ``end``, ``confidence`` and ``speaker`` (a number)."""
    import httpx

    answer = httpx.post(
        f"http://{base}/v1/listen?diarize=true&punctuate=true",
        content=path.read_bytes(),
        headers={"Content-Type": "audio/wav"},
        timeout=600,
    )
    answer.raise_for_status()
    return answer.json()["results"]["channels"][0]["alternatives"][0]["words"]


class ParleyProcess(LoggedProcess):
    """A Parley server (``parley serve`` or ``parley cluster``) reachable at ``self.base``
    (host:port)."""

    base: str

    @property
    def url(self) -> str:
        return f"ws://{self.base}/v1/stream"

    def health(self) -> dict:
        with urllib.request.urlopen(f"http://{self.base}/health", timeout=10) as response:
            return json.loads(response.read())
