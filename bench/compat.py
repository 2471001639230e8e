"""The same conversation through each wire a Parley server speaks, as each vendor's
client sees it: Parley's own client on /v1/stream, deepgram-sdk and LiveKit's Deepgram
plugin on /v1/listen, the openai package's realtime client on /v1/realtime.

One `parley serve --diarization bundle` in its own process; each client streams a
two-voice espeak conversation in real time (100 ms of audio every 100 ms; LiveKit:
10 ms frames, as a room track gives them) asking for speakers where its wire can.
Per wire: WER of the finals' text, the speaker ids in them, final latency (wall time
from sending the audio at a final's end to receiving it; the segment's end on the
native, Deepgram and OpenAI wires; LiveKit's events only carry the last word's end,
so its figure also holds the pause after it) and its ratio to the native wire's.

Usage: python bench/compat.py [--turns 8]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import statistics
import time

from common import print_table, write_json

import aiohttp
import soxr

from audio_fixtures import DIALOGUE_LINES, PLAIN_VOICES, conversation, wer
from load import Server
from parley.client.stream import run_stream, stream_url
from parley.client.transcript import Transcript
from parley.core.audio import SAMPLE_RATE
from parley.protocol.messages import Final, FinalReason, ServerMessage, StreamConfig

CHUNK_S = 0.1


class Clock:
    """When each piece of audio was sent, to time results by the audio they end at."""

    def __init__(self):
        self.sent: list[tuple[float, float]] = []  # (stream time sent up to, monotonic time)

    def mark(self, stream_time: float) -> None:
        self.sent.append((stream_time, time.monotonic()))

    def latency(self, end: float) -> float | None:
        for stream_time, at in self.sent:
            if stream_time >= end - 1e-6:
                return time.monotonic() - at
        return None


async def paced(data: bytes, bytes_per_s: int, clock: Clock, chunk_s: float = CHUNK_S):
    step = int(bytes_per_s * chunk_s)
    began = time.monotonic()
    for k, i in enumerate(range(0, len(data), step)):
        await asyncio.sleep(max(0.0, began + k * chunk_s - time.monotonic()))
        yield data[i : i + step]
        clock.mark((i + step) / bytes_per_s)


def pcm16(audio) -> bytes:
    import numpy as np

    return (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()


async def native(port: int, audio) -> dict:
    clock, transcript, latencies = Clock(), Transcript(), []

    def on_message(message: ServerMessage) -> None:
        if isinstance(message, Final) and message.reason == FinalReason.SILENCE:  # speech_final
            latencies.append(clock.latency(message.end))
        transcript.apply(message)

    url = stream_url(f"ws://127.0.0.1:{port}/v1/stream", StreamConfig(diarization=True), None)
    await run_stream(
        url,
        paced(pcm16(audio), 2 * SAMPLE_RATE, clock),
        2 * SAMPLE_RATE,
        fast=True,
        on_message=on_message,
    )
    return {
        "text": " ".join(f.text for f in transcript.finals),
        "speakers": {w.speaker for f in transcript.finals for w in f.words},
        "latencies": latencies,
    }


async def deepgram_sdk(port: int, audio) -> dict:
    from deepgram import AsyncDeepgramClient
    from deepgram.environment import DeepgramClientEnvironment

    local = f"127.0.0.1:{port}"
    client = AsyncDeepgramClient(
        api_key="unused",
        environment=DeepgramClientEnvironment(
            base=f"http://{local}", production=f"ws://{local}", agent="", agent_rest=""
        ),
    )
    clock, texts, speakers, latencies = Clock(), [], set(), []
    async with client.listen.v1.connect(
        model="nova-3",
        encoding="linear16",
        sample_rate=SAMPLE_RATE,
        interim_results="true",
        diarize="true",
        punctuate="true",
    ) as live:

        async def receive():
            async for message in live:
                if message.type == "Results" and message.is_final:
                    alternative = message.channel.alternatives[0]
                    texts.append(alternative.transcript)
                    speakers.update(w.speaker for w in alternative.words)
                    if message.speech_final:
                        latencies.append(clock.latency(message.start + message.duration))

        receiving = asyncio.create_task(receive())
        async for chunk in paced(pcm16(audio), 2 * SAMPLE_RATE, clock):
            await live.send_media(chunk)
        await live.send_close_stream()
        await receiving
    return {"text": " ".join(texts), "speakers": speakers, "latencies": latencies}


async def openai_realtime(port: int, audio) -> dict:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key="unused", base_url=f"http://127.0.0.1:{port}/v1")
    clock, texts, latencies, stopped = Clock(), [], [], {}
    rate = 24000
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as rt:
        await rt.session.update(
            session={
                "type": "transcription",
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": rate},
                        "turn_detection": {"type": "server_vad"},
                    }
                },
            }
        )

        async def receive():
            async for event in rt:
                if event.type == "input_audio_buffer.speech_stopped":
                    stopped[event.item_id] = event.audio_end_ms / 1000
                elif event.type == "conversation.item.input_audio_transcription.completed":
                    texts.append(event.transcript)
                    latencies.append(clock.latency(stopped[event.item_id]))
                elif event.type == "error":
                    return  # the commit after the audio: everything before it is in

        receiving = asyncio.create_task(receive())
        async for chunk in paced(pcm16(soxr.resample(audio, SAMPLE_RATE, rate)), 2 * rate, clock):
            await rt.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())
        await rt.input_audio_buffer.commit()
        await receiving
    return {"text": " ".join(texts), "speakers": set(), "latencies": latencies}


async def livekit_plugin(port: int, audio) -> dict:
    from livekit import rtc
    from livekit.agents import stt as agents_stt
    from livekit.plugins import deepgram

    clock, texts, speakers, latencies = Clock(), [], set(), []
    async with aiohttp.ClientSession() as http:
        stt = deepgram.STT(
            api_key="unused",
            http_session=http,
            sample_rate=SAMPLE_RATE,
            base_url=f"http://127.0.0.1:{port}/v1/listen",
            enable_diarization=True,
        )
        stream = stt.stream()

        async def feed():
            async for chunk in paced(pcm16(audio), 2 * SAMPLE_RATE, clock, chunk_s=0.01):
                stream.push_frame(rtc.AudioFrame(chunk, SAMPLE_RATE, 1, len(chunk) // 2))
            stream.end_input()

        feeding = asyncio.create_task(feed())
        async for event in stream:
            if event.type is agents_stt.SpeechEventType.FINAL_TRANSCRIPT:
                alternative = event.alternatives[0]
                texts.append(alternative.text)
                speakers.add(alternative.speaker_id)
                latencies.append(clock.latency(alternative.end_time))
        await feeding
    return {"text": " ".join(texts), "speakers": speakers, "latencies": latencies}


WIRES = {
    "native /v1/stream": native,
    "deepgram-sdk /v1/listen": deepgram_sdk,
    "openai realtime /v1/realtime": openai_realtime,
    "livekit-plugins-deepgram /v1/listen": livekit_plugin,
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--model", default="tiny.en")
    args = parser.parse_args()
    audio, truth = conversation(
        [(PLAIN_VOICES[k % 2], DIALOGUE_LINES[k % len(DIALOGUE_LINES)]) for k in range(args.turns)],
        gap_s=0.6,
    )
    said = " ".join(u.text for u in truth)
    server = Server(args.model, "bundle", [], "warning", log_name="compat")
    rows = []
    try:
        port = int(server.base.split(":")[1])
        for wire, run in WIRES.items():
            outcome = asyncio.run(run(port, audio))
            latencies = sorted(x for x in outcome["latencies"] if x is not None)
            rows.append(
                {
                    "wire": wire,
                    "wer": wer(said, outcome["text"]),
                    "speaker_ids": len(outcome["speakers"] - {None}),
                    "finals": len(latencies),
                    "latency_p50_s": statistics.median(latencies) if latencies else None,
                    "latency_max_s": latencies[-1] if latencies else None,
                    "text": outcome["text"],
                }
            )
            print(f"{wire}: done", flush=True)
    finally:
        server.stop()
    base = rows[0]["latency_p50_s"]
    for row in rows:
        p50 = row["latency_p50_s"]
        row["latency_p50_vs_native"] = p50 / base if p50 and base else None
    print()
    print_table(
        rows,
        [
            "wire",
            "wer",
            "speaker_ids",
            "finals",
            "latency_p50_s",
            "latency_p50_vs_native",
            "latency_max_s",
        ],
    )
    path = write_json(
        "compat",
        {
            "model": args.model,
            "turns": args.turns,
            "audio_s": len(audio) / SAMPLE_RATE,
            "rows": rows,
        },
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
