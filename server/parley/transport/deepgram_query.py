"""What a /v1/listen query asks for, read into Parley's terms (protocol.md section 9),
for the live wire and the pre-recorded endpoint alike."""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass

from parley.core.redaction import REDACTED
from parley.core.search import SearchWord, check_searches, search
from parley.core.vad import VadConfig
from parley.protocol.messages import Encoding, ErrorCode, ProtocolError, StreamConfig
from parley.protocol.stream_config import bool_param, language_tag
from parley.recordings.media import RawAudio
from parley.transport.deepgram_groups import MAX_UTT_SPLIT_S, UTT_SPLIT_S
from parley.transport.dialect import every, turn_detection

# The recordings' form and query flags, read leniently (anything else is false), as the
# vendors' SDKs send them.
TRUE = ("1", "true", "yes", "on")
ENCODINGS = {"linear16": Encoding.PCM_S16LE, "mulaw": Encoding.MULAW, "alaw": Encoding.ALAW}


@dataclass(frozen=True)
class ListenOptions:
    """What a /v1/listen connection asked for beyond the stream's config."""

    punctuate: bool = False
    endpointing: bool = True
    utterance_end_s: float | None = None
    vad_events: bool = False
    search: tuple[str, ...] = ()  # terms or phrases looked for in every result's words
    extra: tuple[tuple[str, str], ...] = ()  # key:value pairs told back in the metadata
    multichannel: bool = False  # each channel transcribed on its own, not mixed

    @classmethod
    def of(cls, params: Mapping[str, str]) -> ListenOptions:
        """The connection's options; ProtocolError for a malformed value."""
        utterance_end_ms = whole_param(params, "utterance_end_ms")
        if utterance_end_ms is not None and utterance_end_ms <= 0:
            raise ProtocolError(ErrorCode.BAD_CONFIG, "utterance_end_ms must be positive")
        return cls(
            punctuate=bool_param(params, "punctuate")
            or bool_param(params, "smart_format")
            or bool_param(params, "dictation"),
            endpointing=params.get("endpointing", "").lower() not in ("false", "0"),
            utterance_end_s=utterance_end_ms / 1000 if utterance_end_ms else None,
            vad_events=bool_param(params, "vad_events"),
            search=listen_searches(params),
            extra=listen_extra(params),
            multichannel=bool_param(params, "multichannel"),
        )


# Deepgram's own bound on one extra key:value; the number of pairs is Parley's.
MAX_EXTRA_CHARS = 2048
MAX_EXTRA = 32


def listen_extra(params: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``extra`` (repeatable, ``key:value``): what the metadata tells back, for the
    caller's own bookkeeping; ProtocolError for a pair without a key or past the bounds."""
    pairs = []
    for item in every(params, "extra"):
        key, colon, value = item.partition(":")
        if not colon or not key or len(item) > MAX_EXTRA_CHARS:
            raise ProtocolError(
                ErrorCode.BAD_CONFIG,
                f"extra takes key:value pairs of at most {MAX_EXTRA_CHARS} characters",
            )
        pairs.append((key, value))
    if len(pairs) > MAX_EXTRA:
        raise ProtocolError(ErrorCode.BAD_CONFIG, f"at most {MAX_EXTRA} extra pairs")
    return tuple(pairs)


def listen_searches(params: Mapping[str, str]) -> tuple[str, ...]:
    """``search`` (repeatable): the queries; ProtocolError past their bounds."""
    try:
        return check_searches(every(params, "search"))
    except ValueError as exc:
        raise ProtocolError(ErrorCode.BAD_CONFIG, str(exc)) from None


def search_results(queries: tuple[str, ...], words: list[SearchWord]) -> list[dict]:
    """Deepgram's ``channel.search``: each query's hits in ``words`` (core.search)."""
    return [
        {
            "query": query,
            "hits": [
                {
                    "confidence": hit.confidence,
                    "start": round(hit.start, 3),
                    "end": round(hit.end, 3),
                    "snippet": hit.snippet,
                }
                for hit in hits
            ],
        }
        for query, hits in zip(queries, search(words, queries))
    ]


def whole_param(params: Mapping[str, str], name: str) -> int | None:
    """Query parameter ``name`` as an integer, None when absent; bad_config when it is not one."""
    raw = params.get(name)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ProtocolError(ErrorCode.BAD_CONFIG, f"{name} must be an integer") from None


# The punctuation around a word, less "*": a masked word's asterisks are its letters (s***).
_AROUND = (string.punctuation + "“”‘’¿¡…").replace("*", "")


def bare(word: str) -> str:
    """Deepgram's ``word`` (live and pre-recorded): lower case, without the punctuation
    around it."""
    if word.startswith(REDACTED):
        return REDACTED
    return word.strip().strip(_AROUND).lower()


# Deepgram's redact values → Parley's categories (protocol.md section 9).
REDACT = {
    "pci": ("pci",),
    "credit_card": ("pci",),
    "credit_card_number": ("pci",),
    "ssn": ("ssn",),
    "phone_number": ("phone",),
    "numbers": ("numbers",),
    "aggressive_numbers": ("numbers",),  # Deepgram's every-numeral mode (Flux's too)
    "true": ("numbers",),  # Deepgram: "numbers (or true)"
    "pii": ("pci", "ssn", "phone"),
}


@dataclass(frozen=True)
class ListenVocabulary:
    """``keyterm`` and ``keywords`` (``word:boost``, the boost not used) as keyterms,
    ``redact`` (repeatable) as categories, ``numerals``, ``replace`` (repeatable,
    ``find:replacement``), ``filler_words``, ``profanity_filter`` and ``dictation``:
    live and pre-recorded."""

    keyterms: tuple[str, ...] = ()
    redact: tuple[str, ...] = ()
    numerals: bool = False
    replace: tuple[str, ...] = ()
    filler_words: bool = False
    profanity_filter: bool = False
    dictation: bool = False

    @classmethod
    def of(cls, params: Mapping[str, str]) -> ListenVocabulary:
        """What Deepgram's query asks of the words: keyterms (its repeatable
        ``keyterm``, and ``keywords`` without their boosts), ``redact`` categories,
        ``numerals``, ``replace``, ``filler_words``, ``profanity_filter`` and
        ``dictation``; ProtocolError for a ``redact`` it cannot take."""
        terms = every(params, "keyterm") + [
            k.rsplit(":", 1)[0] if ":" in k else k for k in every(params, "keywords")
        ]
        categories: list[str] = []
        for value in every(params, "redact"):
            if value.lower() == "false":
                continue
            if value.lower() not in REDACT:
                raise ProtocolError(
                    ErrorCode.BAD_CONFIG, f"redact takes {', '.join(REDACT)}; not {value!r}"
                )
            categories += REDACT[value.lower()]
        return cls(
            tuple(terms),
            tuple(dict.fromkeys(categories)),
            bool_param(params, "numerals"),
            tuple(every(params, "replace")),
            bool_param(params, "filler_words"),
            bool_param(params, "profanity_filter"),
            bool_param(params, "dictation"),
        )

    def query(self) -> dict[str, str]:
        """As /v1/stream's parameters."""
        if any("," in term for term in self.keyterms):
            raise ProtocolError(ErrorCode.BAD_CONFIG, "a keyterm may not hold a comma")
        if any("," in item for item in self.replace):
            raise ProtocolError(ErrorCode.BAD_CONFIG, "a replace may not hold a comma")
        native = {
            "keyterms": ",".join(self.keyterms),
            "redact": ",".join(self.redact),
            "replace": ",".join(self.replace),
        }
        for name in ("numerals", "filler_words", "profanity_filter", "dictation"):
            if getattr(self, name):
                native[name] = "true"
        return native


def listen_language(raw: str | None) -> str | None:
    """Deepgram's language: a BCP-47 tag (en-US, which StreamConfig reads as en), or
    multi: detect each segment's."""
    if raw is None or raw.lower() == "multi":
        return None
    return raw


def _require_sample_rate(params: Mapping[str, str]) -> None:
    """Headerless audio says nothing of its rate: Deepgram requires it beside encoding."""
    if "sample_rate" not in params:
        raise ProtocolError(ErrorCode.BAD_CONFIG, "sample_rate is required with encoding")


def listen_config(params: Mapping[str, str]) -> StreamConfig:
    """A live connection's stream settings: raw audio only (its encoding and rate are
    required), one channel or several (mixed, or each its own with ``multichannel``);
    ProtocolError for what is not served."""
    raw_encoding = params.get("encoding")
    if raw_encoding is None:
        raise ProtocolError(
            ErrorCode.BAD_CONFIG,
            "containerised audio is not supported: give encoding "
            "(linear16, mulaw or alaw) and sample_rate",
        )
    encoding = ENCODINGS.get(raw_encoding.lower())
    if encoding is None:
        raise ProtocolError(
            ErrorCode.BAD_CONFIG,
            f"encoding {raw_encoding!r} is not supported; use one of {', '.join(ENCODINGS)}",
        )
    _require_sample_rate(params)
    native = {
        "encoding": encoding.value,
        "sample_rate": params["sample_rate"],
        "channels": params.get("channels", "1"),
        "partials": str(bool_param(params, "interim_results")).lower(),
        "diarization": str(bool_param(params, "diarize") or "diarize_model" in params).lower(),
    }
    language = listen_language(params.get("language"))
    if language is not None:
        native["language"] = language
    native.update(ListenVocabulary.of(params).query())
    return StreamConfig.from_query(native)


def endpointing_vad(params: Mapping[str, str], base: VadConfig) -> VadConfig | None:
    """``endpointing`` in ms as the VAD silence that ends a segment (None: the server's;
    Deepgram's own default is 10 ms, raised as every client's turn silence is)."""
    if params.get("endpointing", "").lower() in ("", "false", "true"):
        return None
    endpointing = whole_param(params, "endpointing")
    assert endpointing is not None
    if endpointing < 0:
        raise ProtocolError(ErrorCode.BAD_CONFIG, "endpointing must be at least 0")
    return turn_detection(base, endpointing)


def recording_language(params: Mapping[str, str]) -> str | None:
    """A pre-recorded request's language as a tag (en-US is en), or None to detect it
    (``multi``, or ``detect_language``); ProtocolError for one that is no language tag."""
    if params.get("detect_language", "").strip().lower() in TRUE:
        return None
    raw = listen_language(params.get("language"))
    return language_tag(raw, "language") if raw else None


RAW_DEMUXERS = {Encoding.PCM_S16LE: "s16le", Encoding.MULAW: "mulaw", Encoding.ALAW: "alaw"}


def recording_raw(params: Mapping[str, str]) -> RawAudio | None:
    """How to read a pre-recorded body that has no container: ``encoding`` (linear16,
    mulaw, alaw) with ``sample_rate`` (8000 to 48000) and ``channels`` (1 to 8, else 1);
    None for any other encoding, or none (ffmpeg reads the container). ProtocolError for a
    headerless encoding without its rate, or either out of range."""
    encoding = ENCODINGS.get(params.get("encoding", "").lower())
    if encoding is None:
        return None
    _require_sample_rate(params)
    config = StreamConfig.from_query(
        {
            "encoding": encoding.value,
            "sample_rate": params["sample_rate"],
            "channels": params.get("channels", "1"),
        }
    )
    return RawAudio(RAW_DEMUXERS[encoding], config.sample_rate, config.channels)


def listen_utt_split(params: Mapping[str, str]) -> float:
    """``utt_split``: the pause between words, in seconds, that starts a new utterance."""
    given = params.get("utt_split")
    try:
        seconds = UTT_SPLIT_S if given is None else float(given)
    except ValueError:
        seconds = -1.0
    if not 0.0 < seconds <= MAX_UTT_SPLIT_S:
        raise ProtocolError(
            ErrorCode.BAD_CONFIG, f"utt_split is seconds, above 0 and at most {MAX_UTT_SPLIT_S:g}"
        )
    return seconds
