"""A stream's configuration (protocol.md section 1): the audio format and what the
client asks of the decoding, read from the query string and told back in
``session_started`` (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any, overload

from parley.core.asr import Decoding, Task, with_fillers
from parley.core.keyterms import check_keyterms
from parley.core.redaction import Redact, parse_redact
from parley.core.replacements import check_replacements
from parley.core.speaker_count import SpeakerCount
from parley.protocol.errors import ErrorCode, ProtocolError


class Encoding(str, Enum):
    """The sample formats a client may send."""

    PCM_S16LE = "pcm_s16le"
    PCM_F32LE = "pcm_f32le"
    MULAW = "mulaw"
    ALAW = "alaw"

    @property
    def sample_width(self) -> int:
        return {"pcm_s16le": 2, "pcm_f32le": 4, "mulaw": 1, "alaw": 1}[self.value]


@dataclass(frozen=True)
class StreamConfig:
    """What a client chooses for its stream, from the query string of /v1/stream."""

    encoding: Encoding = Encoding.PCM_S16LE
    sample_rate: int = 16000
    channels: int = 1
    language: str | None = None
    partials: bool = True
    diarization: bool = False
    languages: tuple[str, ...] = ()  # detection among these (section 2, "Languages")
    task: Task = Task.TRANSCRIBE
    keyterms: tuple[str, ...] = ()  # names and terms the decoder favours
    prompt: str | None = None  # text the model reads first (Whisper's prompt)
    redact: tuple[str, ...] = ()  # Redact categories, applied to every result
    numerals: bool = False  # number words written as digits
    replace: tuple[str, ...] = ()  # find:replacement, made in every result
    filler_words: bool = False  # "um" and "uh" written (a prompt that holds them)
    profanity_filter: bool = False  # profane words masked in every result
    dictation: bool = False  # spoken punctuation ("comma", "period") written as marks
    # What the client knows of its speakers (diarization only; as recordings take them).
    num_speakers: int | None = None
    min_speakers: int | None = None
    max_speakers: int | None = None

    MIN_RATE = 8000
    MAX_RATE = 48000
    MAX_CHANNELS = 8
    MAX_PROMPT_CHARS = 1000
    MAX_SPEAKERS = 64  # the most a stream's linking may hold (ClusteringConfig's bound)
    _LISTS = ("languages", "keyterms", "redact", "replace")  # comma-separated on the query string

    @property
    def audio_format(self) -> tuple[Encoding, int, int]:
        """How its audio arrives: encoding, sample rate and channels."""
        return (self.encoding, self.sample_rate, self.channels)

    @property
    def bytes_per_frame(self) -> int:
        """Bytes of one sample on every channel: audio messages are whole multiples of it."""
        return self.encoding.sample_width * self.channels

    @property
    def decoding(self) -> Decoding:
        """What the stream asks of the model besides its audio."""
        prompt = with_fillers(self.prompt or "") if self.filler_words else self.prompt or ""
        return Decoding(self.language, frozenset(self.languages), self.task, self.keyterms, prompt)

    @property
    def speaker_count(self) -> SpeakerCount:
        """The client's num/min/max_speakers (checked when the config was read)."""
        return SpeakerCount(self.num_speakers, self.min_speakers or 1, self.max_speakers)

    @property
    def redaction(self) -> frozenset[Redact]:
        return frozenset(map(Redact, self.redact))

    def to_json(self) -> dict[str, Any]:
        """The config as JSON (``session_started``'s ``config``): enums as their values,
        tuples as lists."""
        out = asdict(self)
        out["encoding"] = self.encoding.value
        out["task"] = self.task.value
        for name in self._LISTS:
            out[name] = list(out[name])
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StreamConfig:
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
        """The query string of this config; the decoding options only where they are not
        their defaults, so a client's URL stays one that servers before them accept."""
        query = {}
        for name, value in self.to_json().items():
            if name in _DECODING_DEFAULTS and value == _DECODING_DEFAULTS[name]:
                continue
            if isinstance(value, list):
                query[name] = ",".join(value)
            elif value is not None:
                query[name] = str(value).lower() if isinstance(value, bool) else str(value)
        return query

    @classmethod
    def from_query(cls, params: Mapping[str, str]) -> StreamConfig:
        """The config a handshake's query asks for, every parameter checked against
        protocol.md section 1 (defaults for those not given); ProtocolError
        ``bad_config`` for an unknown parameter or an unacceptable value."""
        known = {
            "encoding",
            "sample_rate",
            "channels",
            "language",
            "partials",
            "diarization",
            "token",
            "webhook_url",
            "languages",
            "task",
            "keyterms",
            "prompt",
            "redact",
            "numerals",
            "replace",
            "filler_words",
            "profanity_filter",
            "dictation",
            *_SPEAKER_COUNTS,
        }
        unknown = sorted(set(params) - known)
        if unknown:
            raise ProtocolError(ErrorCode.BAD_CONFIG, f"unknown parameter(s): {', '.join(unknown)}")
        try:
            encoding = Encoding(params.get("encoding", cls.encoding.value))
        except ValueError:
            choices = ", ".join(e.value for e in Encoding)
            raise ProtocolError(
                ErrorCode.BAD_CONFIG, f"encoding must be one of {choices}"
            ) from None
        sample_rate = _int_param(params, "sample_rate", cls.sample_rate, cls.MIN_RATE, cls.MAX_RATE)
        channels = _int_param(params, "channels", cls.channels, 1, cls.MAX_CHANNELS)
        language = params.get("language") or None
        if language is not None and language.lower() == "auto":
            language = None
        prompt = params.get("prompt") or None
        if prompt is not None and len(prompt) > cls.MAX_PROMPT_CHARS:
            raise ProtocolError(
                ErrorCode.BAD_CONFIG, f"prompt has at most {cls.MAX_PROMPT_CHARS} characters"
            )
        try:
            task = Task(params.get("task", cls.task.value))
        except ValueError:
            raise ProtocolError(
                ErrorCode.BAD_CONFIG, "task must be transcribe or translate"
            ) from None
        try:
            keyterms = check_keyterms(_listed(params, "keyterms"))
            redact = tuple(sorted(r.value for r in parse_redact(_listed(params, "redact"))))
            replace = check_replacements(_listed(params, "replace"))
        except ValueError as exc:
            raise ProtocolError(ErrorCode.BAD_CONFIG, str(exc)) from None
        diarization = bool_param(params, "diarization", cls.diarization)
        counts = {
            name: _int_param(params, name, None, 1, cls.MAX_SPEAKERS) for name in _SPEAKER_COUNTS
        }
        given = sorted(name for name, value in counts.items() if value is not None)
        if given and not diarization:
            raise ProtocolError(ErrorCode.BAD_CONFIG, f"{', '.join(given)} needs diarization=true")
        config = cls(
            encoding=encoding,
            sample_rate=sample_rate,
            channels=channels,
            language=language_tag(language, "language") if language else None,
            partials=bool_param(params, "partials", cls.partials),
            diarization=diarization,
            languages=language_tags(_listed(params, "languages"), "languages"),
            task=task,
            keyterms=keyterms,
            prompt=prompt,
            redact=redact,
            numerals=bool_param(params, "numerals", cls.numerals),
            replace=replace,
            filler_words=bool_param(params, "filler_words", cls.filler_words),
            profanity_filter=bool_param(params, "profanity_filter", cls.profanity_filter),
            dictation=bool_param(params, "dictation", cls.dictation),
            **counts,
        )
        try:
            _ = config.speaker_count  # SpeakerCount checks itself: min above max, and such
        except ValueError as exc:
            raise ProtocolError(ErrorCode.BAD_CONFIG, str(exc)) from None
        return config


def language_tag(raw: str, name: str) -> str:
    """A 2 or 3 letter language code, lower case (BCP-47's region dropped: en-US is en)."""
    base = raw.strip().split("-")[0].split("_")[0]
    if not (base.isascii() and base.isalpha() and 2 <= len(base) <= 3):
        raise ProtocolError(
            ErrorCode.BAD_CONFIG, f"{name} takes 2 or 3 letter codes such as 'en'; not {raw!r}"
        )
    return base.lower()


def language_tags(raw: Iterable[str], name: str) -> tuple[str, ...]:
    """Each of ``raw`` as ``language_tag`` makes it, once, in their order."""
    return tuple(dict.fromkeys(language_tag(tag, name) for tag in raw))


def _listed(params: Mapping[str, str], name: str) -> list[str]:
    raw = params.get(name) or ""
    return [part for part in (p.strip() for p in raw.split(",")) if part]


@overload
def _int_param(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int: ...


@overload
def _int_param(
    params: Mapping[str, str], name: str, default: None, low: int, high: int
) -> int | None: ...


def _int_param(
    params: Mapping[str, str], name: str, default: int | None, low: int, high: int
) -> int | None:
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


def bool_param(params: Mapping[str, str], name: str, default: bool = False) -> bool:
    """A boolean query parameter (true/false, 1/0, yes/no); BAD_CONFIG otherwise."""
    raw = params.get(name)
    if raw is None:
        return default
    lowered = raw.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ProtocolError(ErrorCode.BAD_CONFIG, f"{name} must be true or false")


# The decoding options' defaults as to_json writes them (left out of a query).
_SPEAKER_COUNTS = ("num_speakers", "min_speakers", "max_speakers")
_DECODING_DEFAULTS: dict[str, object] = {
    "languages": [],
    "task": Task.TRANSCRIBE.value,
    "keyterms": [],
    "prompt": None,
    "redact": [],
    "numerals": False,
    "replace": [],
    "filler_words": False,
    "profanity_filter": False,
    "dictation": False,
}
# The query parameters that set the decoding (section 1), for wires that carry them
# elsewhere (Twilio's <Parameter>s).
DECODING_OPTIONS = tuple(_DECODING_DEFAULTS) + ("language",)
