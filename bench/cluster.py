"""What Ray Serve costs Parley: the cluster's start-up time, and what its proxy adds to
each message, against a plain `parley serve` of the same model on the same machine.

1. Start-up: `parley cluster --replicas 2` in a child process, from launch to its
   "listening" line (every replica loaded and ready), and the time it reports itself
   (from connecting to Ray to ready: the command's imports excluded).
2. Per-message latency: one session on each server; a text message the server answers
   at once (an unknown type: a non-fatal `bad_message` error) sent N times, direct and
   through the proxy in alternation (the machine is shared and noisy), round trips
   timed. The proxy's added latency is the difference of the medians.
3. For the front-end/ASR split question: a deployment-handle round trip carrying a
   segment's audio (float32, as the scheduler takes it), against the replica's measured
   decode costs (/health), to see what a hop per decode would add.

Usage: python bench/cluster.py [--messages 300] [--model tiny.en]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import sys
import time

from common import ParleyProcess, print_table, write_json

from websockets.asyncio.client import connect

from conftest import free_port
from load import Server

PROBE = json.dumps({"type": "bench_probe"})


class ClusterProcess(ParleyProcess):
    """`parley cluster` in a child process, timed from launch to "listening"."""

    def __init__(self, model: str, diarization: str, replicas: int = 2):
        self.port = free_port()
        self.base = f"127.0.0.1:{self.port}"
        began = time.perf_counter()
        super().__init__(
            [
                sys.executable,
                "-m",
                "parley",
                "cluster",
                "--port",
                str(self.port),
                "--replicas",
                str(replicas),
                "--model",
                model,
                "--diarization",
                diarization,
            ],
            f"cluster-{diarization}",
            r"listening on .* \(ready in ([\d.]+) s",
            600,
            start_new_session=True,
        )
        self.launch_to_ready_s = time.perf_counter() - began
        self.reported_ready_s = float(self.ready[1])

    def stop(self) -> None:
        super().stop(signal.SIGINT, 120)  # Ctrl-C: drain, then stop


async def round_trips(direct: str, proxied: str, messages: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"direct": [], "proxy": []}
    async with connect(direct) as a, connect(proxied) as b:
        for ws in (a, b):
            await ws.recv()  # session_started
        for _ in range(messages):
            for name, ws in (("direct", a), ("proxy", b)):
                began = time.perf_counter()
                await ws.send(PROBE)
                answer = json.loads(await ws.recv())
                times[name].append(time.perf_counter() - began)
                assert answer["type"] == "error", answer
    return times


def handle_round_trip_ms(seconds_of_audio: float, calls: int = 30) -> float:
    """Median round trip of a deployment-handle call carrying that much float32 audio
    to a replica on the running cluster (and a small answer back)."""
    import numpy as np
    import ray
    from ray import serve

    @serve.deployment(ray_actor_options={"num_cpus": 0})
    class Echo:
        def __call__(self, audio: np.ndarray) -> int:
            return len(audio)

    ray.init(address="auto", logging_level="warning")
    try:
        handle = serve.run(Echo.bind(), name="bench-echo", route_prefix=None)
        audio = np.zeros(int(16000 * seconds_of_audio), dtype=np.float32)
        handle.remote(audio).result()
        times = []
        for _ in range(calls):
            began = time.perf_counter()
            handle.remote(audio).result()
            times.append(time.perf_counter() - began)
        serve.delete("bench-echo")
        return 1000 * statistics.median(times)
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--model", default="tiny.en")
    args = parser.parse_args()

    startup = []
    for diarization in ("off", "bundle"):
        cluster = ClusterProcess(args.model, diarization)
        startup.append(
            {
                "diarization": diarization,
                "replicas": 2,
                "launch_to_ready_s": cluster.launch_to_ready_s,
                "reported_ready_s": cluster.reported_ready_s,
            }
        )
        if diarization == "bundle":
            cluster.stop()
            continue
        server = Server(args.model, "off", [], "warning", log_name="cluster-direct")
        try:
            times = asyncio.run(round_trips(server.url, cluster.url, args.messages))
            hops = {seconds: handle_round_trip_ms(seconds) for seconds in (1.0, 15.0)}
            costs = cluster.health()["asr"]["costs"]
        finally:
            server.stop()
            cluster.stop()

    print("Start-up (2 replicas of", args.model + ")")
    print_table(startup, ["diarization", "replicas", "launch_to_ready_s", "reported_ready_s"])
    rows = []
    for name, samples in times.items():
        ms = sorted(1000 * t for t in samples)
        rows.append(
            {
                "path": name,
                "messages": len(ms),
                "rtt_p50_ms": statistics.median(ms),
                "rtt_p90_ms": ms[int(0.9 * len(ms))],
            }
        )
    added = rows[1]["rtt_p50_ms"] - rows[0]["rtt_p50_ms"]
    for row in rows:
        row["x_direct"] = row["rtt_p50_ms"] / rows[0]["rtt_p50_ms"]
    print("\nPer-message round trip (answered at once by the server)")
    print_table(rows, ["path", "messages", "rtt_p50_ms", "rtt_p90_ms", "x_direct"])
    print(f"\nthe proxy adds {added:.2f} ms per round trip (p50)")
    print("\nA deployment-handle hop (what a separate ASR deployment would add per decode)")
    hop_rows = [{"audio_s": s, "handle_rtt_ms": ms} for s, ms in hops.items()]
    print_table(hop_rows, ["audio_s", "handle_rtt_ms"])
    print(f"replica's decode costs: {costs}")
    path = write_json(
        "cluster",
        {
            "model": args.model,
            "startup": startup,
            "round_trips": rows,
            "proxy_added_ms_p50": added,
            "handle_hops": hop_rows,
            "decode_costs": costs,
        },
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
