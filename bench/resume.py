"""Resume through a faulty network: one long conversation streamed in real time twice at
once to the same server (tiny.en), once directly and once through tests/fault_proxy.py,
which cuts the connection at random points (mid-frame included, no close handshake).
The cut stream resumes each time (parley.client.live); its final transcript must equal
the uninterrupted one's, word for word, speakers included.

    python bench/resume.py --minutes 5 --cuts 5
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

from common import print_table, write_json

import numpy as np

from fault_proxy import FaultProxy, Faults  # tests/, on the path through common
from load import Server, conversations
from parley.client.live import LiveStream, send_paced
from parley.client.stream import stream_url
from parley.protocol.messages import Final, StreamConfig

CHUNK_BYTES = 3200  # 100 ms of 16 kHz PCM16


async def stream(url: str, audio: np.ndarray, diarize: bool) -> tuple[list[Final], LiveStream]:
    live = await LiveStream.open(stream_url(url, StreamConfig(diarization=diarize), None))
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()

    async def chunks():
        for i in range(0, len(pcm), CHUNK_BYTES):
            yield pcm[i : i + CHUNK_BYTES]

    sender = asyncio.create_task(send_paced(live, chunks(), 32000))
    async for _ in live:
        pass
    await sender
    await live.close()
    return live.transcript.finals, live


def words(finals: list[Final]) -> list[tuple]:
    return [(w.word, w.start, w.end, w.speaker) for f in finals for w in f.words]


async def run(server: Server, minutes: float, cuts: int, seed: int, diarize: bool) -> dict:
    talks = conversations(int(np.ceil(minutes * 60 / 64)))
    audio = np.concatenate([t.audio for t in talks])[: int(minutes * 60 * 16000)]
    total = len(audio) * 2
    rng = random.Random(seed)
    # Cut points spread over the stream: each connection carries its share, ± half.
    share = total // (cuts + 1)
    faults = Faults(cut_after=[int(share * rng.uniform(0.5, 1.5)) for _ in range(cuts)])
    port = int(server.base.rsplit(":", 1)[1])
    began = time.perf_counter()
    async with FaultProxy(port, faults) as proxy:
        (whole, _), (cut, live) = await asyncio.gather(
            stream(server.url, audio, diarize),
            stream(f"ws://127.0.0.1:{proxy.port}/v1/stream", audio, diarize),
        )
    same = words(whole) == words(cut)
    texts = [f.text for f in whole] == [f.text for f in cut]
    return {
        "minutes": round(len(audio) / 16000 / 60, 2),
        "diarization": diarize,
        "cuts": proxy.cuts,
        "resumes": live.resumes,
        "finals": len(whole),
        "finals_cut": len(cut),
        "words": len(words(whole)),
        "same_text": texts,
        "same_words_times_speakers": same,
        "wall_s": round(time.perf_counter() - began, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--cuts", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--diarization", choices=["off", "on"], default="off")
    parser.add_argument("--model", default="tiny.en")
    args = parser.parse_args()
    server = Server(
        args.model,
        "bundle" if args.diarization == "on" else "off",
        [],
        "warning",
        log_name="resume",
    )
    try:
        row = asyncio.run(run(server, args.minutes, args.cuts, args.seed, args.diarization == "on"))
    finally:
        server.stop()
    print_table([row], list(row))
    print(f"\nwrote {write_json('resume', row)}")


if __name__ == "__main__":
    main()
