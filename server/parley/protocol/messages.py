"""Typed messages of protocol.md (v1) and their JSON form.

Every class here mirrors a section of protocol.md; change both together.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Mapping

from parley.core.asr import Decoding, Task
from parley.core.keyterms import check_keyterms
from parley.core.redaction import Redact, parse_redact

PROTOCOL_VERSION = 1
STREAM_PATH = "/v1/stream"


class Encoding(str, Enum):
    PCM_S16LE = "pcm_s16le"
    PCM_F32LE = "pcm_f32le"
    MULAW = "mulaw"
    ALAW = "alaw"

    @property
    def sample_width(self) -> int:
        return {"pcm_s16le": 2, "pcm_f32le": 4, "mulaw": 1, "alaw": 1}[self.value]


class ErrorCode(str, Enum):
    """Error codes and the close code each one ends the connection with (None: not fatal)."""

    UNAUTHORIZED = "unauthorized"
    FORBIDDEN_ORIGIN = "forbidden_origin"
    NOT_FOUND = "not_found"
    TOO_MANY_SESSIONS = "too_many_sessions"
    BAD_CONFIG = "bad_config"
    BAD_MESSAGE = "bad_message"
    BAD_AUDIO = "bad_audio"
    FRAME_TOO_LARGE = "frame_too_large"
    SERVER_BUSY = "server_busy"
    IDLE_TIMEOUT = "idle_timeout"
    TRANSCRIPTION_FAILED = "transcription_failed"
    DIARIZATION_FAILED = "diarization_failed"
    TOO_MANY_PARTICIPANTS = "too_many_participants"
    SHUTTING_DOWN = "shutting_down"
    INTERNAL_ERROR = "internal_error"

    @property
    def close_code(self) -> int | None:
        return _CLOSE_CODES.get(self)


_CLOSE_CODES: dict[ErrorCode, int] = {
    ErrorCode.UNAUTHORIZED: 4401,
    ErrorCode.FORBIDDEN_ORIGIN: 4403,
    ErrorCode.NOT_FOUND: 4404,
    ErrorCode.TOO_MANY_SESSIONS: 4429,
    ErrorCode.BAD_CONFIG: 4400,
    ErrorCode.FRAME_TOO_LARGE: 1009,
    ErrorCode.SERVER_BUSY: 1013,
    ErrorCode.IDLE_TIMEOUT: 4408,
    ErrorCode.SHUTTING_DOWN: 1001,
    ErrorCode.INTERNAL_ERROR: 1011,
}


MAX_CLOSE_REASON_BYTES = 123  # RFC 6455: a close frame's payload is at most 125 bytes


def close_reason(text: str) -> str:
    """``text`` cut to fit a close frame (123 bytes of UTF-8), on a character boundary."""
    encoded = text.encode("utf-8")
    if len(encoded) <= MAX_CLOSE_REASON_BYTES:
        return text
    cut = encoded[:MAX_CLOSE_REASON_BYTES - len("…".encode())]
    return cut.decode("utf-8", errors="ignore") + "…"


class ProtocolError(Exception):
    """A client did something protocol.md does not allow."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


# ---------------------------------------------------------------- session config


@dataclass(frozen=True)
class StreamConfig:
    """What a client chooses for its stream, from the query string of /v1/stream."""

    encoding: Encoding = Encoding.PCM_S16LE
    sample_rate: int = 16000
    channels: int = 1
    language: str | None = None
    partials: bool = True
    diarization: bool = False
    languages: tuple[str, ...] = ()    # detection among these (section 2, "Languages")
    task: Task = Task.TRANSCRIBE
    keyterms: tuple[str, ...] = ()     # names and terms the decoder favours
    prompt: str | None = None          # text the model reads first (Whisper's prompt)
    redact: tuple[str, ...] = ()       # Redact categories, applied to every result
    numerals: bool = False             # number words written as digits

    MIN_RATE = 8000
    MAX_RATE = 48000
    MAX_CHANNELS = 8
    MAX_PROMPT_CHARS = 1000
    _LISTS = ("languages", "keyterms", "redact")  # comma-separated on the query string

    @property
    def bytes_per_frame(self) -> int:
        """Bytes of one sample on every channel: audio messages are whole multiples of it."""
        return self.encoding.sample_width * self.channels

    @property
    def decoding(self) -> Decoding:
        """What the stream asks of the model besides its audio."""
        return Decoding(self.language, frozenset(self.languages), self.task, self.keyterms,
                        self.prompt or "")

    @property
    def redaction(self) -> frozenset[Redact]:
        return frozenset(map(Redact, self.redact))

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["encoding"] = self.encoding.value
        out["task"] = self.task.value
        for name in self._LISTS:
            out[name] = list(out[name])
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "StreamConfig":
        """The inverse of ``to_json`` (a ``session_started``'s config); fields this
        version does not know are left out."""
        known = {f for f in cls.__dataclass_fields__}
        fields = {k: v for k, v in data.items() if k in known}
        fields["encoding"] = Encoding(fields.get("encoding", cls.encoding.value))
        fields["task"] = Task(fields.get("task", cls.task.value))
        for name in cls._LISTS:
            fields[name] = tuple(fields.get(name) or ())
        return cls(**fields)

    def to_query(self) -> dict[str, str]:
        query = {}
        for name, value in self.to_json().items():
            if isinstance(value, list):
                if value:
                    query[name] = ",".join(value)
            elif value is not None:
                query[name] = str(value).lower() if isinstance(value, bool) else str(value)
        return query

    @classmethod
    def from_query(cls, params: Mapping[str, str]) -> "StreamConfig":
        known = {"encoding", "sample_rate", "channels", "language", "partials", "diarization",
                 "token", "webhook_url", "languages", "task", "keyterms", "prompt", "redact",
                 "numerals"}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ProtocolError(ErrorCode.BAD_CONFIG, f"unknown parameter(s): {', '.join(unknown)}")
        try:
            encoding = Encoding(params.get("encoding", cls.encoding.value))
        except ValueError:
            choices = ", ".join(e.value for e in Encoding)
            raise ProtocolError(ErrorCode.BAD_CONFIG,
                                f"encoding must be one of {choices}") from None
        sample_rate = _int_param(params, "sample_rate", cls.sample_rate, cls.MIN_RATE, cls.MAX_RATE)
        channels = _int_param(params, "channels", cls.channels, 1, cls.MAX_CHANNELS)
        language = params.get("language") or None
        if language is not None and language.lower() == "auto":
            language = None
        prompt = params.get("prompt") or None
        if prompt is not None and len(prompt) > cls.MAX_PROMPT_CHARS:
            raise ProtocolError(ErrorCode.BAD_CONFIG,
                                f"prompt has at most {cls.MAX_PROMPT_CHARS} characters")
        try:
            task = Task(params.get("task", cls.task.value))
        except ValueError:
            raise ProtocolError(ErrorCode.BAD_CONFIG,
                                "task must be transcribe or translate") from None
        try:
            keyterms = check_keyterms(_listed(params, "keyterms"))
            redact = tuple(sorted(r.value for r in parse_redact(_listed(params, "redact"))))
        except ValueError as exc:
            raise ProtocolError(ErrorCode.BAD_CONFIG, str(exc)) from None
        return cls(
            encoding=encoding,
            sample_rate=sample_rate,
            channels=channels,
            language=language_tag(language, "language") if language else None,
            partials=_bool_param(params, "partials", cls.partials),
            diarization=_bool_param(params, "diarization", cls.diarization),
            languages=tuple(dict.fromkeys(language_tag(tag, "languages")
                                          for tag in _listed(params, "languages"))),
            task=task,
            keyterms=keyterms,
            prompt=prompt,
            redact=redact,
            numerals=_bool_param(params, "numerals", cls.numerals),
        )


def language_tag(raw: str, name: str) -> str:
    """A 2 or 3 letter language code, lower case (BCP-47's region dropped: en-US is en)."""
    base = raw.strip().split("-")[0].split("_")[0]
    if not (base.isascii() and base.isalpha() and 2 <= len(base) <= 3):
        raise ProtocolError(ErrorCode.BAD_CONFIG,
                            f"{name} takes 2 or 3 letter codes such as 'en'; not {raw!r}")
    return base.lower()


def _listed(params: Mapping[str, str], name: str) -> list[str]:
    raw = params.get(name) or ""
    return [part for part in (p.strip() for p in raw.split(",")) if part]


def _int_param(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ProtocolError(ErrorCode.BAD_CONFIG, f"{name} must be an integer") from None
    if not low <= value <= high:
        raise ProtocolError(ErrorCode.BAD_CONFIG, f"{name} must be between {low} and {high}")
    return value


def _bool_param(params: Mapping[str, str], name: str, default: bool) -> bool:
    raw = params.get(name)
    if raw is None:
        return default
    lowered = raw.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ProtocolError(ErrorCode.BAD_CONFIG, f"{name} must be true or false")


# ---------------------------------------------------------------- client → server


class ControlType(str, Enum):
    KEEP_ALIVE = "keep_alive"
    FINALIZE = "finalize"
    END_OF_STREAM = "end_of_stream"


def parse_control(text: str) -> ControlType:
    """A client's text message → its type, or ProtocolError(BAD_MESSAGE)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than Python's stack
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "text messages must be JSON objects") from None
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise ProtocolError(ErrorCode.BAD_MESSAGE,
                            'a control message is a JSON object with a string "type"')
    try:
        return ControlType(data["type"])
    except ValueError:
        choices = ", ".join(c.value for c in ControlType)
        raise ProtocolError(ErrorCode.BAD_MESSAGE,
                            f"unknown message type {data['type']!r}; expected one of {choices}"
                            ) from None


def control_message(kind: ControlType) -> str:
    return json.dumps({"type": kind.value})


# ---------------------------------------------------------------- server → client


@dataclass(frozen=True)
class Word:
    word: str
    start: float
    end: float
    probability: float
    speaker: str | None = None


class FinalReason(str, Enum):
    SILENCE = "silence"          # the speaker paused: a natural end of utterance
    MAX_LENGTH = "max_length"    # a long turn was cut; the speech goes on in the next segment
    SPEAKER_CHANGE = "speaker_change"  # the turn passed to another speaker, without a pause
    FINALIZE = "finalize"        # the client asked for it
    END_OF_STREAM = "end_of_stream"


@dataclass(frozen=True)
class SessionStarted:
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
    segment_id: int
    start: float
    type: str = "speech_started"


@dataclass(frozen=True)
class SegmentEnded:
    """The segment's audio is complete; its final follows once decoded."""

    segment_id: int
    end: float
    reason: "FinalReason"
    type: str = "segment_ended"


@dataclass(frozen=True)
class Partial:
    segment_id: int
    start: float
    end: float
    text: str
    speaker: str | None = None
    language: str | None = None  # the language its segment is decoded in
    type: str = "partial"


@dataclass(frozen=True)
class Final:
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
class Finalized:
    audio_end: float
    type: str = "finalized"


class EndReason(str, Enum):
    """Why a session ended without an error; each ends with ``session_ended``, after the
    finals of all the audio received, and then this close code."""

    END_OF_STREAM = "end_of_stream"  # the client sent end_of_stream
    SHUTTING_DOWN = "shutting_down"  # the server drained (SIGTERM)
    MAX_DURATION = "max_duration"    # the session reached limits.max_session_s

    @property
    def close_code(self) -> int:
        return {"end_of_stream": 1000, "shutting_down": 1001, "max_duration": 4410}[self.value]

    @property
    def close_reason(self) -> str:
        return {"end_of_stream": "end of stream", "shutting_down": "server shutting down",
                "max_duration": "maximum session duration reached"}[self.value]


@dataclass(frozen=True)
class SessionEnded:
    audio_duration: float
    segments: int
    reason: EndReason = EndReason.END_OF_STREAM
    type: str = "session_ended"


@dataclass(frozen=True)
class Error:
    code: ErrorCode
    message: str
    segment_id: int | None = None
    type: str = "error"

    @property
    def fatal(self) -> bool:
        return self.code.close_code is not None


ServerMessage = (SessionStarted | SessionResumed | SpeechStarted | SegmentEnded | Partial
                 | Final | SpeakerUpdate | Finalized | SessionEnded | Error)


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


def parse(data: Mapping[str, Any]) -> ServerMessage | None:
    """A server message's JSON object as its typed message (None for a type this
    version does not know: clients ignore those, section 8)."""
    fields = {k: v for k, v in data.items() if k not in ("type", "seq")}  # seq: the wire's
    kind = data.get("type")
    if kind == "session_started":
        return SessionStarted(config=StreamConfig.from_json(fields.pop("config")), **fields)
    if kind in ("final", "speaker_update"):
        fields["words"] = [Word(**w) for w in fields.get("words") or []]
        if kind == "speaker_update":
            return SpeakerUpdate(**fields)
        return Final(**{**fields, "reason": FinalReason(fields["reason"])})
    if kind == "segment_ended":
        return SegmentEnded(**{**fields, "reason": FinalReason(fields["reason"])})
    if kind == "session_ended":
        return SessionEnded(**{**fields, "reason": EndReason(fields.get("reason",
                                                                        "end_of_stream"))})
    if kind == "error":
        fields.pop("fatal", None)
        return Error(**{**fields, "code": ErrorCode(fields["code"])})
    simple = {"speech_started": SpeechStarted, "partial": Partial, "finalized": Finalized,
              "session_resumed": SessionResumed}
    return simple[kind](**fields) if kind in simple else None


def decode(text: str) -> dict[str, Any]:
    """A server message as a dict (clients work on dicts; the type field says which)."""
    data = json.loads(text)
    if not isinstance(data, dict) or "type" not in data:
        raise ValueError(f"not a server message: {text[:200]!r}")
    return data
