"""Turns that pause mid-sentence: does a voice agent's wire end the turn at the pause?

Sixteen requests a caller makes of an agent, each said two ways by espeak-ng in two
voices: **paused**, broken off at a word the sentence goes on from ("I would like to
book a flight to" … "Paris on Friday morning."), with ``--pause`` seconds of silence
between the halves; and **whole**, the same sentence said at once. Each is one stream,
in real time (100 ms messages paced by the clock, ``--concurrent`` at once), on Deepgram
Flux's /v2/listen and AssemblyAI's /v3/ws with their default turn settings, and OpenAI's
realtime transcription with ``semantic_vad`` (eagerness ``auto``), against a
`parley serve` (tiny.en) of the working tree and, with ``--before PATH``, one whose
Python package is imported from PATH (a checkout's ``server`` folder) in the same run.

Reports per wire and server: **cut** (the paused requests whose turn ended at the pause:
two turns or more with words, or OpenAI items), **held whole** (whole requests whose
turn did not end by its pause after the last word but by the wire's longest quiet), and
the end-of-turn latency (wall time from sending the audio at the last word's end to
receiving the end of the turn, or OpenAI's completed transcript) median and p90, for
whole and for paused requests.
Usage: python bench/turns.py [--before /tmp/before/server] [--pause 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import time
from dataclasses import dataclass

from common import print_table, write_json

import numpy as np
import websockets

from audio_fixtures import PLAIN_VOICES, conversation, silence
from load import Server, sent_at_end
from parley.transport.assemblyai_turns import MAX_TURN_SILENCE_MS
from parley.transport.flux import EOT_TIMEOUT_MS
from parley.transport.openai_turns import longest_wait_s

REQUESTS = [
    ("I would like to book a flight to", "Paris on Friday morning."),
    ("My account number is", "four five six seven."),
    ("I called yesterday because", "my card was declined."),
    ("Can you send the invoice to", "my office address?"),
    ("We need more time and", "a bigger budget for the launch."),
    ("The meeting was moved to", "Thursday afternoon."),
    ("I think the problem is", "the network cable."),
    ("Please transfer the money from", "my savings account."),
    ("I was hoping that", "you could help me today."),
    ("Let me check with my manager and", "call you back."),
    ("The package should arrive on", "Monday or Tuesday."),
    ("I want to cancel my", "subscription please."),
    ("She said the report was", "almost finished."),
    ("We can meet at the", "coffee shop downtown."),
    ("Could you tell me if", "the store is open?"),
    ("I forgot my password and", "now I am locked out."),
]
WIRES = {
    "flux": "/v2/listen?model=flux-general-en&encoding=linear16&sample_rate=16000",
    "assemblyai": "/v3/ws?encoding=pcm_s16le&sample_rate=16000",
    "openai": "/v1/realtime?intent=transcription",
}
OPENAI_SESSION = {
    "type": "session.update",
    "session": {
        "type": "transcription",
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": 16000},
                "turn_detection": {"type": "semantic_vad"},
            }
        },
    },
}
LONGEST_WAIT_S = {  # each wire's default longest wait for a turn left open, s
    "flux": EOT_TIMEOUT_MS[2] / 1000,
    "assemblyai": MAX_TURN_SILENCE_MS / 1000,
    "openai": longest_wait_s("auto"),
}
CHUNK_S = 0.1
TAIL_S = max(LONGEST_WAIT_S.values()) + 2.0  # quiet after the last word: past every wait


@dataclass(frozen=True)
class Said:
    kind: str  # "paused" or "whole"
    audio: np.ndarray
    speech_end: float  # stream seconds of the last word's end


def requests_said(pause_s: float) -> list[Said]:
    out = []
    for k, (first, rest) in enumerate(REQUESTS):
        voice = PLAIN_VOICES[k % len(PLAIN_VOICES)]
        paused, truth = conversation([(voice, first), (voice, rest)], gap_s=pause_s, trim=True)
        whole, whole_truth = conversation([(voice, f"{first} {rest}")], trim=True)
        for kind, audio, end in (
            ("paused", paused, truth[-1].end),
            ("whole", whole, whole_truth[-1].end),
        ):
            out.append(Said(kind, np.concatenate([audio, silence(TAIL_S)]), end))
    return out


async def stream_turns(url: str, wire: str, said: Said) -> list[tuple[float, str, str]]:
    """Stream ``said`` in real time; each end of a turn as (wall time received,
    transcript, trigger), and the wall time the audio at its speech end was sent."""
    pcm = (np.clip(said.audio, -1, 1) * 32767).astype("<i2").tobytes()
    step = int(CHUNK_S * 16000) * 2
    sent_at: list[float] = []
    ends: list[tuple[float, str, str]] = []
    async with websockets.connect(url, max_size=None) as ws:
        if wire == "openai":
            await ws.send(json.dumps(OPENAI_SESSION))

        async def send() -> None:
            began = time.monotonic()
            for k, i in enumerate(range(0, len(pcm), step)):
                await asyncio.sleep(max(0.0, began + k * CHUNK_S - time.monotonic()))
                chunk = pcm[i : i + step]
                if wire == "openai":
                    audio = base64.b64encode(chunk).decode()
                    await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": audio}))
                else:
                    await ws.send(chunk)
                sent_at.append(time.monotonic())
            ending = {"flux": "CloseStream", "assemblyai": "Terminate"}
            # OpenAI's: a commit, answered with an error once every item was committed
            await ws.send(json.dumps({"type": ending.get(wire, "input_audio_buffer.commit")}))

        async def receive() -> None:
            async for raw in ws:
                m = json.loads(raw)
                kind = m.get("type")
                if wire == "flux" and m.get("event") == "EndOfTurn":
                    ends.append((time.monotonic(), m["transcript"], m.get("trigger", "")))
                elif wire == "assemblyai" and kind == "Turn" and m.get("end_of_turn"):
                    if not m.get("turn_is_formatted"):
                        ends.append((time.monotonic(), m["transcript"], ""))
                elif kind == "conversation.item.input_audio_transcription.completed":
                    ends.append((time.monotonic(), m["transcript"], ""))
                elif wire == "openai" and kind == "error" and len(sent_at) * step >= len(pcm):
                    return

        await asyncio.gather(send(), receive())
    spoken = sent_at_end(sent_at, said.speech_end)
    return [(at - spoken, text, trigger) for at, text, trigger in ends if text.strip()]


async def run(base: str, wire: str, said: list[Said], concurrent: int) -> list[dict]:
    gate = asyncio.Semaphore(concurrent)

    async def one(item: Said) -> dict:
        async with gate:
            ends = await stream_turns(f"ws://{base}{WIRES[wire]}", wire, item)
        return {"kind": item.kind, "ends": ends}

    return await asyncio.gather(*(one(s) for s in said))


def summary(outcomes: list[dict], longest_s: float) -> dict:
    paused = [o for o in outcomes if o["kind"] == "paused"]
    whole = [o for o in outcomes if o["kind"] == "whole"]

    def latencies(group: list[dict]) -> list[float]:
        return [o["ends"][-1][0] for o in group if o["ends"]]

    def pct(values: list[float], q: float) -> float | None:
        return round(float(np.percentile(values, q)), 2) if values else None

    whole_s, paused_s = latencies(whole), latencies(paused)
    return {
        "cut": round(sum(len(o["ends"]) >= 2 for o in paused) / len(paused), 3),
        "held whole": round(sum(s >= longest_s for s in whole_s) / len(whole), 3),
        "whole p50 s": pct(whole_s, 50),
        "whole p90 s": pct(whole_s, 90),
        "paused p50 s": pct(paused_s, 50),
        "paused p90 s": pct(paused_s, 90),
        "no end": sum(not o["ends"] for o in outcomes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--pause", type=float, default=1.0)
    parser.add_argument("--concurrent", type=int, default=4)
    parser.add_argument("--before", help="the server package to compare with (PYTHONPATH)")
    args = parser.parse_args()
    said = requests_said(args.pause)
    servers = [("this tree", None)] + ([("before", args.before)] if args.before else [])
    rows, details = [], []
    for name, path in servers:
        env = {"PYTHONPATH": path} if path else None
        server = Server(args.model, "off", [], "warning", "turns", env)
        try:
            for wire in WIRES:
                outcomes = asyncio.run(run(server.base, wire, said, args.concurrent))
                longest = LONGEST_WAIT_S[wire]
                rows.append({"server": name, "wire": wire, **summary(outcomes, longest)})
                details.append({"server": name, "wire": wire, "outcomes": outcomes})
                print_table(rows[-1:], list(rows[-1]))
        finally:
            server.stop()
    print()
    print_table(rows, list(rows[0]))
    path = write_json(
        "turns", {"pause_s": args.pause, "model": args.model, "rows": rows, "details": details}
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
