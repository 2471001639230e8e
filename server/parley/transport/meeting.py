"""/v1/meeting: one audio stream per meeting participant, as meeting-bot platforms
deliver them (Recall.ai's ``audio_separate_raw.data``, Zoom RTMS, LiveKit rooms).

Each participant is a session of its own whose speaker is their name, so no
diarization is needed; results come back on the connection in Parley's own messages
(section 3 of protocol.md), told in meeting time. protocol.md section 13 is the
contract; Recall.ai's message shape is accepted as it is.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from typing import Any

from websockets.datastructures import Headers

from parley.protocol.messages import ControlType, ErrorCode, ProtocolError, StreamConfig
from parley.protocol.paths import MEETING_PATH
from parley.sessions.session_group import SessionGroup
from parley.sessions.streams import StreamFactory
from parley.transport.dialect import Opened, Setup, json_event, json_object
from parley.transport.native import NativeWire, ParleyKeysAndErrors
from parley.transport.timed_track import TimedTrack

RECALL_AUDIO = "audio_separate_raw.data"
RECALL_LEAVE = "participant_events.leave"


class MeetingDialect(ParleyKeysAndErrors):
    """Parley's own wire (keys, refusals, results), one session per participant."""

    path = MEETING_PATH
    resumable = False  # a meeting bot's platform reconnects with tracks of its own

    def setup(self, params: Mapping[str, str], headers: Headers) -> Setup[None]:
        config = StreamConfig.from_query(params)
        if config.diarization:
            raise ProtocolError(
                ErrorCode.BAD_CONFIG,
                "a meeting session labels each participant by name: diarization is not needed",
            )
        return Setup(config, webhook_url=params.get("webhook_url"), options=None)

    def translator(self, opened: Opened[None], streams: StreamFactory) -> MeetingTranslator:
        return MeetingTranslator(opened, streams.tracks(opened.setup.config, opened.setup.vad))


class MeetingTranslator(NativeWire):
    """session_started and results as on /v1/stream; participants' audio in."""

    def __init__(self, opened: Opened[None], group: SessionGroup):
        super().__init__(opened)
        self._group = group
        self._tracks: dict[str, TimedTrack] = {}
        self._names: dict[str, str] = {}  # participant id → the speaker name shown

    @property
    def stream(self) -> SessionGroup:
        return self._group

    async def receive(self, message: str | bytes) -> bool:
        session = self._group
        data = json_event(
            message,
            ("type", "event"),
            "messages are JSON text objects (audio "
            'base64 in them) with a string "type" (or Recall.ai\'s "event")',
        )
        kind = data.get("type") or data.get("event")
        if kind in ("audio", RECALL_AUDIO):
            participant, audio, at_s = _audio(data)
            await self._feed(session, participant, audio, at_s)
        elif kind in ("participant_left", RECALL_LEAVE):
            await session.rest(str(_participant(data)["id"]))  # their last words: a final now
        elif kind == ControlType.FINALIZE.value:
            await session.finalize()
        elif kind == ControlType.END_OF_STREAM.value:
            return True
        elif kind != ControlType.KEEP_ALIVE.value and not str(kind).startswith(
            ("participant_events.", "transcript.", "audio_mixed_raw.")
        ):
            raise ProtocolError(ErrorCode.BAD_MESSAGE, f"unknown message type {kind!r}")
        return False

    async def _feed(
        self, session: SessionGroup, participant: dict, audio: bytes, at_s: float | None
    ) -> None:
        key = str(participant["id"])
        track = self._tracks.get(key)
        if track is None:
            cap = self._opened.limits["max_participants"]
            if len(self._tracks) >= cap:  # each participant is a session's work
                raise ProtocolError(
                    ErrorCode.TOO_MANY_PARTICIPANTS,
                    f"this meeting has its "
                    f"limit of {cap} participants; participant {key!r}'s "
                    "audio was dropped",
                )
            # A participant's track starts where their first audio was taken.
            track = self._tracks[key] = TimedTrack(self._opened.setup.config, start_s=at_s or 0.0)
        stream = session.track(
            key, self._opened.setup.config, self._speaker(key, participant), offset_s=track.start_s
        )
        await track.feed(stream, audio, at_s)

    def _speaker(self, key: str, participant: dict) -> str:
        """Their name, made unique if another participant has it too."""
        if key not in self._names:
            name = str(participant.get("name") or key)
            if name in self._names.values():
                name = f"{name} ({key})"
            self._names[key] = name
        return self._names[key]


def _recall_inner(data: dict) -> dict:
    """Recall.ai nests the payload as data.data."""
    if "event" not in data:
        return data
    return json_object(json_object(data.get("data"), "data").get("data"), "data.data")


def _participant(data: dict) -> dict:
    participant = _recall_inner(data).get("participant")
    if (
        not isinstance(participant, dict)
        or participant.get("id") in (None, "")
        or isinstance(participant.get("id"), (dict, list))
    ):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "the message needs participant.id")
    return participant


def _audio(data: dict) -> tuple[dict, bytes, float | None]:
    """(participant, audio bytes, the time it was taken at) of a Parley or Recall.ai
    audio message."""
    inner = _recall_inner(data)
    encoded: Any = inner.get("buffer") if "event" in data else inner.get("audio")
    timestamp: Any = inner.get("timestamp")
    if isinstance(timestamp, dict):  # Recall.ai: {"relative": seconds, "absolute": ISO}
        timestamp = timestamp.get("relative")
    try:
        audio = base64.b64decode(encoded if isinstance(encoded, str) else "", validate=True)
        at_s = float(timestamp) if timestamp is not None else None
        if at_s is not None and not math.isfinite(at_s):
            raise ValueError("timestamp must be finite")
    except (binascii.Error, ValueError, TypeError):
        raise ProtocolError(
            ErrorCode.BAD_AUDIO,
            "audio must be base64 and timestamp a number of seconds; the message was dropped",
        ) from None
    return _participant(data), audio, at_s
