"""What the one front door costs a message: `parley serve`'s WebSocket round trip under
uvicorn (transport/front_door.py, today's) against the websockets server it replaced,
in one run, on the same pipeline.

Both doors serve one in-process pipeline on the fake engine (no model: the message is
what is timed). One session on each; a text message the server answers at once (an
unknown type: a non-fatal ``bad_message`` error) is sent N times to each in
alternation, round trips timed; also N plain GETs of /healthz each. Ratios to the old
door, medians, in one process (the machine is shared and noisy).

Usage: python bench/front_door.py [--messages 500]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from common import print_table, write_json

import httpx
from websockets.asyncio.client import connect
from websockets.asyncio.server import serve

from fake_engine import load_fake_asr
from parley.app import FRAME_HARD_LIMIT_FACTOR, start_server
from parley.config import Settings

PROBE = json.dumps({"type": "bench_probe"})


async def timed_messages(url: str, count: int) -> list[float]:
    times = []
    async with connect(url) as ws:
        await ws.recv()  # session_started
        for _ in range(count):
            began = time.perf_counter()
            await ws.send(PROBE)
            assert json.loads(await ws.recv())["type"] == "error"
            times.append(time.perf_counter() - began)
    return times


async def main(messages: int) -> None:
    settings = Settings(server={"port": 0})
    worker, asr = load_fake_asr(settings)
    running = await start_server(settings, worker, asr, warm_up=False)
    service = running.service
    old = await serve(
        service.handle,
        "127.0.0.1",
        0,
        process_request=service.route,
        select_subprotocol=service.endpoint.select_subprotocol,
        max_size=settings.server.max_frame_bytes * FRAME_HARD_LIMIT_FACTOR,
        compression=None,
    )
    doors = {
        "websockets server (before)": old.sockets[0].getsockname()[1],
        "uvicorn front door (now)": running.port,
    }
    samples: dict[str, dict[str, list[float]]] = {d: {"ws": [], "http": []} for d in doors}
    async with httpx.AsyncClient() as client:
        for _ in range(5):  # alternate in rounds, so that noise falls on both
            for door, port in doors.items():
                samples[door]["ws"] += await timed_messages(
                    f"ws://127.0.0.1:{port}/v1/stream", messages // 5
                )
                for _ in range(messages // 5):
                    began = time.perf_counter()
                    assert (await client.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200
                    samples[door]["http"].append(time.perf_counter() - began)
    old.close()
    await old.wait_closed()
    await running.stop()
    rows = []
    for door, kinds in samples.items():
        ws = sorted(1000 * t for t in kinds["ws"])
        http = sorted(1000 * t for t in kinds["http"])
        rows.append(
            {
                "door": door,
                "messages": len(ws),
                "ws_rtt_p50_ms": statistics.median(ws),
                "ws_rtt_p90_ms": ws[int(0.9 * len(ws))],
                "http_get_p50_ms": statistics.median(http),
            }
        )
    for row in rows:
        row["ws_x_before"] = row["ws_rtt_p50_ms"] / rows[0]["ws_rtt_p50_ms"]
        row["http_x_before"] = row["http_get_p50_ms"] / rows[0]["http_get_p50_ms"]
    print_table(
        rows,
        [
            "door",
            "messages",
            "ws_rtt_p50_ms",
            "ws_rtt_p90_ms",
            "ws_x_before",
            "http_get_p50_ms",
            "http_x_before",
        ],
    )
    print(f"wrote {write_json('front-door', {'rows': rows})}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=500)
    asyncio.run(main(parser.parse_args().messages))
