"""/v1/twilio against a Twilio simulator: the documented event sequence (connected,
start, media per 20 ms per track, dtmf, mark, stop; numbers as strings), 8 kHz mu-law
made from real speech, one track per direction, signed as Twilio signs (the `twilio`
package computes the signature). Results leave by webhooks, verified with the
`standardwebhooks` package (protocol.md section 11)."""

import asyncio
import base64
import json
import os

import numpy as np
import pytest
import soxr
from twilio.request_validator import RequestValidator
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from audio_fixtures import (
    DIALOGUE_LINES,
    PLAIN_VOICES,
    SAMPLE_WAV,
    conversation,
    read_wav,
    sample_turns,
    wer,
)
from conftest import as_received, heard_between, pcm16, refused, serve_real
from parley.client.stream import run_stream
from parley.protocol.messages import Final
from test_webhooks import SECRET, Receiver

AUTH_TOKEN = base64.b16encode(os.urandom(16)).decode().lower()
CHUNK_MS = 20


def mulaw(audio: np.ndarray) -> bytes:
    """16 kHz float audio → 8 kHz G.711 mu-law, as a phone network carries it."""
    narrow = np.clip(soxr.resample(audio, 16000, 8000), -1, 1)
    magnitude = np.log1p(255 * np.abs(narrow)) / np.log1p(255)
    codes = np.round(np.sign(narrow) * magnitude * 127).astype(int)
    return np.where(codes >= 0, 0xFF - codes, 0x7F + codes).astype(np.uint8).tobytes()


def two_tracks(turns: int = 4):
    """A call: the caller says the even lines, the agent the odd ones; each track holds
    only its own speaker (silence elsewhere). (tracks, truth per track, whole audio)."""
    lines = [(PLAIN_VOICES[k % 2], DIALOGUE_LINES[k]) for k in range(turns)]
    audio, truth = conversation(lines, gap_s=0.6)
    audio = as_received(audio)
    tracks, said = {}, {}
    for name, parity in (("inbound", 0), ("outbound", 1)):
        own = np.zeros_like(audio)
        for k, turn in enumerate(truth):
            if k % 2 == parity:
                span = slice(int((turn.start - 0.2) * 16000), int((turn.end + 0.2) * 16000))
                own[span] = audio[span]
        tracks[name] = own
        said[name] = [t for k, t in enumerate(truth) if k % 2 == parity]
    return tracks, said


async def twilio_call(
    url: str,
    tracks: dict[str, np.ndarray],
    *,
    signature: str | None,
    parameters: dict | None = None,
    skip_ms: tuple[int, int] | None = None,
    pace_s: float = 0.0,
) -> None:
    """Play Twilio's side of a Media Stream; ``skip_ms`` leaves out the outbound track's
    media in that span (as when Twilio drops packets), timestamps going on."""
    headers = {"X-Twilio-Signature": signature} if signature else {}
    coded = {name: mulaw(audio) for name, audio in tracks.items()}
    sequence = iter(range(1, 1 << 30))
    base = {"streamSid": "MZ00000000000000000000000000000001"}
    async with connect(url, additional_headers=headers) as ws:
        await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
        await ws.send(
            json.dumps(
                {
                    **base,
                    "event": "start",
                    "sequenceNumber": str(next(sequence)),
                    "start": {
                        "accountSid": "AC01",
                        "callSid": "CA01",
                        "streamSid": base["streamSid"],
                        "tracks": list(tracks),
                        "mediaFormat": {
                            "encoding": "audio/x-mulaw",
                            "sampleRate": 8000,
                            "channels": 1,
                        },
                        "customParameters": parameters or {},
                    },
                }
            )
        )
        length = max(len(c) for c in coded.values())
        for k, at in enumerate(range(0, length, 8 * CHUNK_MS)):
            for name, data in coded.items():
                ms = at // 8
                if name == "outbound" and skip_ms and skip_ms[0] <= ms < skip_ms[1]:
                    continue
                await ws.send(
                    json.dumps(
                        {
                            **base,
                            "event": "media",
                            "sequenceNumber": str(next(sequence)),
                            "media": {
                                "track": name,
                                "chunk": str(k + 1),
                                "timestamp": str(ms),
                                "payload": base64.b64encode(data[at : at + 8 * CHUNK_MS]).decode(),
                            },
                        }
                    )
                )
            if pace_s:
                await asyncio.sleep(pace_s)
        await ws.send(
            json.dumps(
                {
                    **base,
                    "event": "dtmf",
                    "sequenceNumber": str(next(sequence)),
                    "dtmf": {"track": "inbound_track", "digit": "5"},
                }
            )
        )
        await ws.send(
            json.dumps(
                {
                    **base,
                    "event": "mark",
                    "sequenceNumber": str(next(sequence)),
                    "mark": {"name": "greeting"},
                }
            )
        )
        await ws.send(
            json.dumps(
                {
                    **base,
                    "event": "stop",
                    "sequenceNumber": str(next(sequence)),
                    "stop": {"accountSid": "AC01", "callSid": "CA01"},
                }
            )
        )
        async for _ in ws:  # the server ends the session when its audio is transcribed
            pass
        assert ws.close_code == 1000


def signed(url: str) -> str:
    return RequestValidator(AUTH_TOKEN).compute_signature(url, {})


async def test_only_calls_twilio_signed_are_admitted(start):
    """With the auth token set: no signature, or a signature of another URL or under
    another token, is refused with HTTP 403 before any audio; with a public URL set,
    the signature of that URL admits."""
    _, server = await start(twilio={"auth_token": AUTH_TOKEN})
    url = f"ws://127.0.0.1:{server.port}/v1/twilio"
    for signature in (
        None,
        signed(url + "x"),
        RequestValidator("0" * 32).compute_signature(url, {}),
    ):
        with pytest.raises(InvalidStatus) as refused:
            await twilio_call(url, {"inbound": np.zeros(1600, np.float32)}, signature=signature)
        assert refused.value.response.status_code == 403
    await twilio_call(url, {"inbound": np.zeros(1600, np.float32)}, signature=signed(url))
    # Behind a proxy, Twilio signs the public URL, not the one the request reached.
    _, proxied = await start(
        twilio={"auth_token": AUTH_TOKEN, "public_url": "wss://voice.example.com"}
    )
    url = f"ws://127.0.0.1:{proxied.port}/v1/twilio"
    await twilio_call(
        url,
        {"inbound": np.zeros(1600, np.float32)},
        signature=signed("wss://voice.example.com/v1/twilio"),
    )
    with pytest.raises(InvalidStatus):
        await twilio_call(url, {"inbound": np.zeros(1600, np.float32)}, signature=signed(url))


async def test_each_track_is_transcribed_as_its_speaker_with_timestamps_and_gaps(start):
    """Fake engine: every final is exactly its own track's audio, labelled by the
    (renamed) track, timed by the media timestamps even across a 1.5 s gap in the
    outbound media; call.started, the finals, call.dtmf and session.ended arrive as
    verified webhooks, each track's finals in order."""
    tracks, said = two_tracks()
    receiver = Receiver()
    async with receiver as hooks:
        _, server = await start(
            twilio={"auth_token": AUTH_TOKEN}, webhooks={"url": hooks, "secret": SECRET}
        )
        url = f"ws://127.0.0.1:{server.port}/v1/twilio"
        gap = (int(said["inbound"][0].start * 1000), int(said["inbound"][0].end * 1000))
        await twilio_call(
            url, tracks, signature=signed(url), skip_ms=gap, parameters={"outbound_speaker": "Dana"}
        )
        await server.stop()
    events = receiver.events
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["session.started", "call.started"] and kinds[-1] == "session.ended"
    assert events[1]["data"]["speakers"] == {"inbound": "caller", "outbound": "Dana"}
    assert events[1]["data"]["call_sid"] == "CA01"
    assert kinds[-2] == "call.dtmf" and events[-2]["data"]["digit"] == "5"
    finals = [e["data"] for e in events if e["type"] == "transcript.final"]
    for track, speaker in (("inbound", "caller"), ("outbound", "Dana")):
        own = [f for f in finals if f["speaker"] == speaker and f["text"]]
        assert len(own) == len(said[track])
        assert [f["start"] for f in own] == sorted(f["start"] for f in own)
        for final, turn in zip(own, said[track]):
            assert final["start"] <= turn.start and turn.end <= final["end"]
            assert {w["speaker"] for w in final["words"]} == {speaker}
            heard = heard_between(as_decoded(tracks[track]), final["start"], final["end"])
            assert final["text"] == heard


def as_decoded(audio: np.ndarray) -> np.ndarray:
    """What the server hears of a track: through 8 kHz mu-law and back to 16 kHz."""
    from parley.protocol.audio import AudioDecoder
    from parley.protocol.messages import Encoding, StreamConfig

    decoder = AudioDecoder(StreamConfig(encoding=Encoding.MULAW, sample_rate=8000))
    return np.concatenate([decoder.decode(mulaw(audio)), decoder.finish()])


def sample_call() -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """pyannote's sample.wav, a real phone conversation, split into the call's two
    directions by its reference transcript (.stm): Diane calls, Sheila answers.
    (track audio, the text said on each)."""
    audio = read_wav(SAMPLE_WAV)
    tracks = {"inbound": np.zeros_like(audio), "outbound": np.zeros_like(audio)}
    said: dict[str, list[str]] = {"inbound": [], "outbound": []}
    for turn in sample_turns():
        track = "inbound" if turn.voice == "Diane" else "outbound"
        span = slice(int(turn.start * 16000), int(turn.end * 16000))
        tracks[track][span] = audio[span]
        said[track].append(turn.text)
    return tracks, {track: " ".join(lines) for track, lines in said.items()}


async def test_a_real_two_track_call_is_transcribed_per_speaker(models_dir):
    """Real tiny.en on real speech: sample.wav's two speakers as the call's two tracks,
    paced at four times real time. Each track's finals, delivered as verified webhooks,
    carry its speaker and read what was said as well as the same track streamed on
    /v1/stream at 16 kHz does (the phone path loses nothing; tiny.en's own WER on
    Sheila's side is 0.27 at 16 kHz, so the absolute bound is the model's)."""
    tracks, said = sample_call()
    finals, native = await call_then_native(models_dir, tracks, speed=4)
    assert {f["speaker"] for f in finals} == {"caller", "agent"}
    for track, speaker in (("inbound", "caller"), ("outbound", "agent")):
        heard = " ".join(f["text"] for f in finals if f["speaker"] == speaker)
        error = wer(said[track], heard)
        assert error <= wer(said[track], native[track]) + 0.05, heard
        assert error <= 0.30, heard


async def call_then_native(
    models_dir, tracks: dict[str, np.ndarray], speed: float, **settings
) -> tuple[list[dict], dict[str, str]]:
    """On one real server (with ``settings``): ``tracks`` as a signed Twilio call at
    ``speed`` times real time, then each track alone on /v1/stream at 16 kHz. The
    call's finals as its webhooks delivered them, and each track's native text."""
    receiver = Receiver()
    async with receiver as hooks:
        server = await serve_real(
            models_dir,
            twilio={"auth_token": AUTH_TOKEN},
            webhooks={"url": hooks, "secret": SECRET},
            **settings,
        )
        try:
            url = f"ws://127.0.0.1:{server.port}/v1/twilio"
            await twilio_call(url, tracks, signature=signed(url), pace_s=CHUNK_MS / 1000 / speed)
            native = {
                track: await native_text(server.port, audio) for track, audio in tracks.items()
            }
        finally:
            await server.stop()
    call = next(e["data"]["session_id"] for e in receiver.events if e["type"] == "call.started")
    finals = [
        e["data"]
        for e in receiver.events
        if e["type"] == "transcript.final" and e["data"]["session_id"] == call
    ]
    return finals, native


async def native_text(port: int, audio: np.ndarray) -> str:
    data = pcm16(audio)

    async def chunks():
        for i in range(0, len(data), 3200):
            yield data[i : i + 3200]

    messages = []
    await run_stream(
        f"ws://127.0.0.1:{port}/v1/stream", chunks(), 32000, fast=True, on_message=messages.append
    )
    return " ".join(m.text for m in messages if isinstance(m, Final))


async def test_a_call_can_be_followed_live(start):
    """A Twilio call's results, which its own socket never carries, reach a follower of
    /v1/sessions/{id}/events in Parley's own messages, labelled and each with its track,
    until session_ended; a wrong key or an unknown session is refused."""
    tracks, said = two_tracks(turns=2)
    receiver = Receiver()
    async with receiver as hooks:
        _, server = await start(token="k1", webhooks={"url": hooks, "secret": SECRET})
        url = f"ws://127.0.0.1:{server.port}/v1/twilio?token=k1"
        call = asyncio.create_task(twilio_call(url, tracks, signature=None, pace_s=0.002))
        while not receiver.events:  # session.started tells the session's id
            await asyncio.sleep(0.01)
        session_id = receiver.events[0]["data"]["session_id"]
        follow = f"ws://127.0.0.1:{server.port}/v1/sessions/{session_id}/events"
        for bad, code in (
            (follow, 4401),
            (follow + "?token=wrong", 4401),
            (follow.replace(session_id, "0" * 32) + "?token=k1", 4404),
        ):
            message, close_code = await refused(bad)
            assert (message["type"], close_code) == ("error", code)
        async with connect(follow, additional_headers={"Authorization": "Bearer k1"}) as ws:
            followed = [json.loads(m) async for m in ws]
        await call
    assert followed[0] == {"type": "following", "session_id": session_id}
    assert followed[-1]["type"] == "session_ended" and ws.close_code == 1000
    finals = [m for m in followed if m["type"] == "final" and m["text"]]
    assert {f["speaker"] for f in finals} == {"caller", "agent"}
    # each segment's messages say which direction of the call they are of, as do its
    # webhooks' finals
    directions = {"caller": "inbound", "agent": "outbound"}
    assert all(f["track"] == directions[f["speaker"]] for f in finals)
    assert all("track" in m for m in followed if "segment_id" in m)
    hooked = [e["data"] for e in receiver.events if e["type"] == "transcript.final"]
    assert hooked and all(f["track"] == directions[f["speaker"]] for f in hooked)


async def test_a_calls_parameters_set_its_decoding(start):
    """The <Stream>'s <Parameter>s set the call's decoding as /v1/stream's query does:
    ones the model can do are taken; one it cannot (translation on an English-only model)
    or an unknown redaction is a bad_config error, told in the call's session.ended, and
    the call goes on with its decoding as before."""
    receiver = Receiver()
    async with receiver as hooks:
        _, server = await start(webhooks={"url": hooks, "secret": SECRET})
        url = f"ws://127.0.0.1:{server.port}/v1/twilio"
        call = {"inbound": np.zeros(1600, np.float32)}
        for parameters in (
            {"redact": "pci,ssn", "keyterms": "Okonkwo", "numerals": "true"},
            {"task": "translate"},
            {"redact": "email"},
        ):
            await twilio_call(url, call, signature=None, parameters=parameters)
        await server.stop()
    ended = [e["data"]["error_codes"] for e in receiver.events if e["type"] == "session.ended"]
    assert ended == [[], ["bad_config"], ["bad_config"]]
