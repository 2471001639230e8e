"""What a /v1/listen query asks for, read into Parley's terms (protocol.md section 9),
for the live wire and the pre-recorded endpoint alike."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from parley.protocol.messages import Encoding, ErrorCode, ProtocolError
from parley.protocol.stream_config import bool_param
from parley.transport.dialect import every

ENCODINGS = {"linear16": Encoding.PCM_S16LE, "mulaw": Encoding.MULAW, "alaw": Encoding.ALAW}


@dataclass(frozen=True)
class ListenOptions:
    """What a /v1/listen connection asked for beyond the stream's config."""

    punctuate: bool = False
    endpointing: bool = True
    utterance_end_s: float | None = None
    vad_events: bool = False


def whole_param(params: Mapping[str, str], name: str) -> int | None:
    raw = params.get(name)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ProtocolError(ErrorCode.BAD_CONFIG, f"{name} must be an integer") from None


# Deepgram's redact values → Parley's categories (protocol.md section 9).
REDACT = {
    "pci": ("pci",),
    "credit_card": ("pci",),
    "credit_card_number": ("pci",),
    "ssn": ("ssn",),
    "phone_number": ("phone",),
    "numbers": ("numbers",),
    "true": ("pci", "ssn"),
    "pii": ("pci", "ssn", "phone"),
}


@dataclass(frozen=True)
class ListenVocabulary:
    """``keyterm`` and ``keywords`` (``word:boost``, the boost not used) as keyterms,
    ``redact`` (repeatable) as categories, and ``numerals``: live and pre-recorded."""

    keyterms: tuple[str, ...] = ()
    redact: tuple[str, ...] = ()
    numerals: bool = False

    @classmethod
    def of(cls, params: Mapping[str, str]) -> ListenVocabulary:
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
        return cls(tuple(terms), tuple(dict.fromkeys(categories)), bool_param(params, "numerals"))

    def query(self) -> dict[str, str]:
        """As /v1/stream's parameters."""
        if any("," in term for term in self.keyterms):
            raise ProtocolError(ErrorCode.BAD_CONFIG, "a keyterm may not hold a comma")
        native = {"keyterms": ",".join(self.keyterms), "redact": ",".join(self.redact)}
        if self.numerals:
            native["numerals"] = "true"
        return native


def listen_language(raw: str | None) -> str | None:
    """Deepgram's language: a BCP-47 tag (en-US, which StreamConfig reads as en), or
    multi: detect each segment's."""
    if raw is None or raw.lower() == "multi":
        return None
    return raw
