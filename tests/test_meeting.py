"""/v1/meeting: one track per participant, each labelled by name, told in meeting time
(protocol.md section 13). The fake engine decodes, so every final must be exactly its
own participant's audio."""

import base64
import json

import numpy as np
from websockets.asyncio.client import connect

from audio_fixtures import DIALOGUE_LINES, SPEAKERS, conversation
from conftest import as_received, heard_between, pcm16

CHUNK_S = 0.1
PEOPLE = [("p1", "Ada"), ("p2", "Grace"), ("p3", "Ada")]  # two share a name


def meeting(turns: int = 6):
    """Three espeak voices taking turns; each participant's audio holds only their own
    turns. (per participant: audio and turns), whole length in samples."""
    voices = [SPEAKERS["A"], SPEAKERS["B"], SPEAKERS["C"]]
    audio, truth = conversation(
        [(voices[k % 3], DIALOGUE_LINES[k]) for k in range(turns)], gap_s=0.8
    )
    audio = as_received(audio)
    own = {}
    for p, (pid, _) in enumerate(PEOPLE):
        track = np.zeros_like(audio)
        turns_of = [t for k, t in enumerate(truth) if k % 3 == p]
        for turn in turns_of:
            span = slice(int((turn.start - 0.2) * 16000), int((turn.end + 0.2) * 16000))
            track[span] = audio[span]
        own[pid] = (track, turns_of)
    return own, len(audio)


def audio_message(pid: str, name: str, chunk: np.ndarray, at_s: float, recall: bool) -> str:
    payload = base64.b64encode(pcm16(chunk)).decode()
    if recall:  # Recall.ai's real-time endpoint event, as it sends it
        return json.dumps(
            {
                "event": "audio_separate_raw.data",
                "data": {
                    "data": {
                        "buffer": payload,
                        "timestamp": {"relative": at_s, "absolute": "x"},
                        "participant": {"id": int(pid[1:]), "name": name, "is_host": False},
                    },
                    "realtime_endpoint": {"id": "re", "metadata": {}},
                    "bot": {"id": "b"},
                },
            }
        )
    return json.dumps(
        {
            "type": "audio",
            "participant": {"id": pid, "name": name},
            "audio": payload,
            "timestamp": at_s,
        }
    )


async def test_each_participant_is_a_speaker_in_meeting_time(start):
    """Three participants, one of them in Recall.ai's shape and one joining only when they
    first speak; one leaves (their last words get a final at once). Every final carries
    its participant's name (made unique when two share it), is exactly that
    participant's audio, and is timed in meeting time; finals come in the order they
    ended, across participants."""
    own, length = meeting()
    step = int(CHUNK_S * 16000)
    first = {pid: int(max(0.0, turns[0].start - 0.5) * 16000) for pid, (_, turns) in own.items()}
    first["p1"] = first["p2"] = 0  # p3 joins late
    leaves = int((own["p2"][1][-1].end + 0.1) * 16000)  # p2 leaves as they finish
    _, server = await start()
    async with connect(f"ws://127.0.0.1:{server.port}/v1/meeting") as ws:
        started = json.loads(await ws.recv())
        assert started["type"] == "session_started"
        for at in range(0, length, step):
            for pid, name in PEOPLE:
                if at < first[pid] or (pid == "p2" and at >= leaves):
                    continue
                chunk = own[pid][0][at : min(at + step, leaves) if pid == "p2" else at + step]
                await ws.send(audio_message(pid, name, chunk, at / 16000, recall=pid == "p3"))
            if at < leaves <= at + step:
                await ws.send(json.dumps({"type": "participant_left", "participant": {"id": "p2"}}))
        await ws.send(json.dumps({"type": "end_of_stream"}))
        messages = [json.loads(m) async for m in ws]
    assert ws.close_code == 1000 and messages[-1]["type"] == "session_ended"
    assert not [m for m in messages if m["type"] == "error"]
    ends = [m["end"] for m in messages if m["type"] == "final"]
    assert ends == sorted(ends)  # merged in time order across participants
    finals = [m for m in messages if m["type"] == "final" and m["text"]]
    assert len({f["segment_id"] for f in finals}) == len(finals)  # unique across participants
    names = {"p1": "Ada", "p2": "Grace", "3": "Ada (3)"}
    for pid, (track, turns) in own.items():
        speaker = names[pid if pid != "p3" else "3"]
        mine = [f for f in finals if f["speaker"] == speaker]

        def within(final, turn) -> bool:
            return turn.start - 0.5 <= final["start"] < final["end"] <= turn.end + 0.6

        for turn in turns:  # each turn is heard, in finals inside it (a pause may split it)
            inside = [f for f in mine if within(f, turn)]
            assert inside and inside[0]["start"] <= turn.start and turn.end <= inside[-1]["end"]
        assert len(mine) == sum(within(f, t) for f in mine for t in turns)
        if pid == "p2":
            assert mine[-1]["reason"] == "finalize"  # leaving closed their last words
        for final in mine:
            assert final["text"] == heard_between(track, final["start"], final["end"])
            assert {w["speaker"] for w in final["words"]} == {speaker}
