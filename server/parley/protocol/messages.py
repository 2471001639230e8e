"""Typed messages of protocol.md (v1) and their JSON form.

Every class here mirrors a section of protocol.md; change both together.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any, get_args

# The errors and the stream's configuration have their own modules; the wires import
# them from here, with the messages.
from parley.protocol.errors import CloseCode as CloseCode
from parley.protocol.errors import ErrorCode as ErrorCode
from parley.protocol.errors import ProtocolError as ProtocolError
from parley.protocol.stream_config import Encoding as Encoding
from parley.protocol.stream_config import StreamConfig as StreamConfig
from parley.protocol.stream_config import language_tag as language_tag

PROTOCOL_VERSION = 1


# ---------------------------------------------------------------- client → server


class ControlType(str, Enum):
    """The client's control messages (protocol.md section 2)."""

    KEEP_ALIVE = "keep_alive"
    FINALIZE = "finalize"
    END_OF_STREAM = "end_of_stream"
    KNOWN_SPEAKER = "known_speaker"


def control_fields(text: str) -> dict[str, Any]:
    """A client's text message → its JSON object, whose ``type`` is a ControlType; or
    ProtocolError(BAD_MESSAGE)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than Python's stack
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "text messages must be JSON objects") from None
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE, 'a control message is a JSON object with a string "type"'
        )
    try:
        ControlType(data["type"])
        return data
    except ValueError:
        choices = ", ".join(c.value for c in ControlType)
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE,
            f"unknown message type {data['type']!r}; expected one of {choices}",
        ) from None


def control_message(kind: ControlType) -> str:
    """A client's control message of ``kind``, as JSON text."""
    return json.dumps({"type": kind.value})


def known_speaker_message(name: str, clip: bytes) -> str:
    """A client's ``known_speaker`` message: ``name`` and the bytes of a 2 to 10 s clip of
    the voice (any format ffmpeg reads), as a base64 data URL."""
    audio = "data:application/octet-stream;base64," + base64.b64encode(clip).decode("ascii")
    return json.dumps({"type": ControlType.KNOWN_SPEAKER.value, "name": name, "audio": audio})


# ---------------------------------------------------------------- server → client


@dataclass(frozen=True)
class Word:
    """A word of a final, with its times, probability and speaker."""

    word: str
    start: float
    end: float
    probability: float
    speaker: str | None = None


class FinalReason(str, Enum):
    """Why a segment's final was cut where it was."""

    SILENCE = "silence"  # the speaker paused: a natural end of utterance
    MAX_LENGTH = "max_length"  # a long turn was cut; the speech goes on in the next segment
    SPEAKER_CHANGE = "speaker_change"  # the turn passed to another speaker, without a pause
    FINALIZE = "finalize"  # the client asked for it
    END_OF_STREAM = "end_of_stream"


@dataclass(frozen=True)
class SessionStarted:
    """The first message of a session: its effective configuration and limits."""

    session_id: str
    config: StreamConfig
    limits: dict[str, Any]
    model: str
    server: str | None = None  # on a cluster: the replica serving the session
    resume_token: str | None = None  # where the session may be resumed (section 6a)
    model_languages: list[str] = field(default_factory=lambda: ["en"])  # it transcribes
    type: str = "session_started"
    protocol: int = PROTOCOL_VERSION


@dataclass(frozen=True)
class SessionResumed:
    """The first message on a connection that resumed a session: send audio from
    ``audio_received_bytes`` on; messages after the client's ``last_seq`` follow."""

    session_id: str
    audio_received_bytes: int
    last_seq: int  # the newest message the session has sent so far
    type: str = "session_resumed"


@dataclass(frozen=True)
class SpeechStarted:
    """Voice activity opened a segment."""

    segment_id: int
    start: float
    type: str = "speech_started"


@dataclass(frozen=True)
class SegmentEnded:
    """The segment's audio is complete; its final follows once decoded."""

    segment_id: int
    end: float
    reason: FinalReason
    type: str = "segment_ended"


@dataclass(frozen=True)
class Partial:
    """The current hypothesis of the open segment; replaced by the next."""

    segment_id: int
    start: float
    end: float
    text: str
    speaker: str | None = None
    language: str | None = None  # the language its segment is decoded in
    confidence: float | None = None  # the decode's mean token probability
    type: str = "partial"


@dataclass(frozen=True)
class Final:
    """The settled transcript of one segment; never revised, but by ``speaker_update``."""

    segment_id: int
    start: float
    end: float
    text: str
    reason: FinalReason
    words: list[Word] = field(default_factory=list)
    speaker: str | None = None
    language: str | None = None  # the language decoded in (section 5, "Languages")
    language_probability: float | None = None  # when it was detected, not forced
    confidence: float | None = None  # the decode's mean token probability
    warnings: list[str] = field(default_factory=list)  # FinalWarning values
    type: str = "final"


class FinalWarning(str, Enum):
    """What a final's ``warnings`` may say about it."""

    # The decode shows the signs of speech the model cannot read (an English-only model
    # hearing another language): its text is likely not what was said.
    LANGUAGE_UNSUPPORTED = "language_unsupported"


@dataclass(frozen=True)
class SpeakerUpdate:
    """A later diarization step changed the speakers of a final already sent."""

    segment_id: int
    speaker: str | None
    words: list[Word] = field(default_factory=list)
    type: str = "speaker_update"


@dataclass(frozen=True)
class SpeakerNames:
    """The labels whose voices match a client's known speakers, as they stand now."""

    names: dict[str, str] = field(default_factory=dict)  # label → known speaker's name
    type: str = "speaker_names"


@dataclass(frozen=True)
class Finalized:
    """The answer to ``finalize``: all audio up to ``audio_end`` is in finals sent."""

    audio_end: float
    type: str = "finalized"


class EndReason(str, Enum):
    """Why a session ended without an error; each ends with ``session_ended``, after the
    finals of all the audio received, and then this close code."""

    END_OF_STREAM = "end_of_stream"  # the client sent end_of_stream
    SHUTTING_DOWN = "shutting_down"  # the server drained (SIGTERM)
    MAX_DURATION = "max_duration"  # the session reached limits.max_session_s

    @property
    def close_code(self) -> CloseCode:
        return {
            "end_of_stream": CloseCode.NORMAL,
            "shutting_down": CloseCode.GOING_AWAY,
            "max_duration": CloseCode.MAX_DURATION,
        }[self.value]

    @property
    def close_reason(self) -> str:
        return {
            "end_of_stream": "end of stream",
            "shutting_down": "server shutting down",
            "max_duration": "maximum session duration reached",
        }[self.value]


@dataclass(frozen=True)
class SessionEnded:
    """The last message of a session that ended without an error."""

    audio_duration: float
    segments: int
    reason: EndReason = EndReason.END_OF_STREAM
    type: str = "session_ended"


@dataclass(frozen=True)
class Error:
    """An error; a fatal one is followed by the close code of its code."""

    code: ErrorCode
    message: str
    segment_id: int | None = None
    type: str = "error"

    @property
    def fatal(self) -> bool:
        return self.code.close_code is not None


ServerMessage = (
    SessionStarted
    | SessionResumed
    | SpeechStarted
    | SegmentEnded
    | Partial
    | Final
    | SpeakerUpdate
    | SpeakerNames
    | Finalized
    | SessionEnded
    | Error
)


def _round_times(value: Any) -> Any:
    # Stream times go out in milliseconds' precision; more is noise on the wire.
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, list):
        return [_round_times(v) for v in value]
    if isinstance(value, dict):
        return {k: _round_times(v) for k, v in value.items()}
    return value


def encode(message: ServerMessage, seq: int | None = None) -> str:
    """``seq``: the message's number, on a resumable session."""
    data = as_json(message)
    if seq is not None:
        data["seq"] = seq
    return json.dumps(data, ensure_ascii=False)


def as_json(message: ServerMessage) -> dict[str, Any]:
    """A server message as the JSON object protocol.md gives it."""
    data = asdict(message)
    if isinstance(message, SessionStarted):
        data["config"] = message.config.to_json()
        if message.server is None:
            del data["server"]
        if message.resume_token is None:
            del data["resume_token"]
    if isinstance(message, Error):
        data["fatal"] = message.fatal
        if message.segment_id is None:
            del data["segment_id"]
    for key, value in list(data.items()):
        if isinstance(value, Enum):
            data[key] = value.value
    return _round_times(data)


# Each message class by its wire type, from the union above (one list of them).
_TYPES: dict[str, type[ServerMessage]] = {cls.type: cls for cls in get_args(ServerMessage)}


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of ``data`` that ``cls`` has (and not ``type``): a newer server's
    other fields are left out, as section 8 lets clients do."""
    names = {f.name for f in fields(cls)} - {"type"}
    return {k: v for k, v in data.items() if k in names}


def _words(data: Mapping[str, Any]) -> list[Word]:
    return [Word(**_known(Word, w)) for w in data.get("words") or []]


def parse(data: Mapping[str, Any]) -> ServerMessage | None:
    """A server message's JSON object as its typed message (None for a type this
    version does not know: clients ignore those, and fields they do not know, section 8)."""
    cls = _TYPES.get(data.get("type"))  # type: ignore[arg-type]
    if cls is None:
        return None
    given = _known(cls, data)
    if cls is SessionStarted:
        given["config"] = StreamConfig.from_json(given["config"])
    if cls in (Final, SpeakerUpdate):
        given["words"] = _words(data)
    if cls in (Final, SegmentEnded):
        given["reason"] = FinalReason(given["reason"])
    if cls is SessionEnded:
        given["reason"] = EndReason(given.get("reason", EndReason.END_OF_STREAM.value))
    if cls is Error:
        given["code"] = ErrorCode(given["code"])
    return cls(**given)


def decode(text: str | bytes) -> dict[str, Any]:
    """A server message as a dict (clients work on dicts; the type field says which)."""
    data = json.loads(text)
    if not isinstance(data, dict) or "type" not in data:
        raise ValueError(f"not a server message: {text[:200]!r}")
    return data
