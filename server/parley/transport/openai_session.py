"""The settings of an OpenAI realtime transcription session: read from ``session.update``
(or the older ``transcription_session.update``) and told back as the session object
(protocol.md section 10). Pure: no session, no socket."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from parley.core.asr import Decoding
from parley.core.vad import VadConfig
from parley.protocol.messages import Encoding, ErrorCode, ProtocolError, StreamConfig, language_tag
from parley.transport.dialect import json_object, turn_detection
from parley.transport.openai_turns import EAGERNESS

FORMATS = {
    "audio/pcm": Encoding.PCM_S16LE,
    "audio/pcmu": Encoding.MULAW,
    "audio/pcma": Encoding.ALAW,
}
# (session format type, rate) of the older session form's names
OLD_FORMATS = {
    "pcm16": ("audio/pcm", 24000),
    "g711_ulaw": ("audio/pcmu", 8000),
    "g711_alaw": ("audio/pcma", 8000),
}
PCM_RATE = 24000
LOGPROBS = "item.input_audio_transcription.logprobs"  # what include may ask for
DEFAULT_CONFIG = StreamConfig(
    encoding=Encoding.PCM_S16LE, sample_rate=PCM_RATE, partials=False
)  # deltas are only text that will not change


@dataclass(frozen=True)
class SessionSettings:
    """An OpenAI realtime session's settings, as ``session.update`` left them."""

    config: StreamConfig
    vad: VadConfig
    server_vad: bool = True  # False: turn_detection null, the client commits
    logprobs: bool = False  # include: the words' log probabilities on completed events
    eagerness: str | None = None  # semantic_vad's (openai_turns.py); None: server_vad

    def to_json(self, session_id: str, model: str) -> dict:
        """The session object of ``session.created`` and ``session.updated``."""
        config, vad = self.config, self.vad
        audio_format: dict = {"type": {v: k for k, v in FORMATS.items()}[config.encoding]}
        if config.encoding is Encoding.PCM_S16LE:
            audio_format["rate"] = config.sample_rate
        turns: dict | None = None
        if self.server_vad and self.eagerness is not None:
            turns = {"type": "semantic_vad", "eagerness": self.eagerness}
        elif self.server_vad:
            turns = {
                "type": "server_vad",
                "prefix_padding_ms": vad.speech_pad_ms,
                "silence_duration_ms": vad.min_silence_ms,
            }
        return {
            "type": "transcription",
            "id": session_id,
            "object": "realtime.transcription_session",
            "audio": {
                "input": {
                    "format": audio_format,
                    "transcription": {
                        "model": model,
                        "language": config.language,
                        "prompt": config.prompt or "",
                    },
                    "turn_detection": turns,
                    "noise_reduction": None,
                }
            },
            "include": [LOGPROBS] if self.logprobs else None,
        }

    def updated(
        self,
        fields: dict,
        old_form: bool,
        server_vad_defaults: VadConfig,
        check_decoding: Callable[[Decoding], None],
    ) -> SessionSettings:
        """These settings with an update's ``session`` fields applied; ProtocolError
        (bad_config) for one Parley cannot take."""
        if old_form:
            audio_format, transcription, turns = _old_form(fields)
        else:
            if fields.get("type", "transcription") != "transcription":
                raise ProtocolError(
                    ErrorCode.BAD_CONFIG,
                    'only transcription sessions are served: session.type must be "transcription"',
                )
            audio = json_object(fields.get("audio"), "session.audio")
            audio_in = json_object(audio.get("input"), "session.audio.input")
            audio_format = audio_in.get("format")
            transcription = audio_in.get("transcription")
            turns = audio_in["turn_detection"] if "turn_detection" in audio_in else ...
        new = self
        if "include" in fields:
            include = fields["include"] or []
            if not isinstance(include, list) or not all(isinstance(i, str) for i in include):
                raise ProtocolError(ErrorCode.BAD_CONFIG, "include must be a list of strings")
            new = replace(new, logprobs=LOGPROBS in include)
        if audio_format is not None:
            new = replace(new, config=replace(new.config, **_audio_format(audio_format)))
        if transcription is not None:
            new = new._transcribing(json_object(transcription, "transcription"), check_decoding)
        if turns is not ...:
            new = replace(
                new,
                server_vad=turns is not None,
                vad=_turn_vad(turns, server_vad_defaults) if turns is not None else new.vad,
                eagerness=_eagerness(turns),
            )
        return new

    def _transcribing(
        self, transcription: dict, check_decoding: Callable[[Decoding], None]
    ) -> SessionSettings:
        language = transcription.get("language") or None
        if language is not None and not isinstance(language, str):
            raise ProtocolError(
                ErrorCode.BAD_CONFIG, 'transcription.language must be a language code such as "en"'
            )
        prompt = transcription.get("prompt") or None
        if prompt is not None and not isinstance(prompt, str):
            raise ProtocolError(ErrorCode.BAD_CONFIG, "transcription.prompt must be a string")
        if prompt is not None and len(prompt) > StreamConfig.MAX_PROMPT_CHARS:
            raise ProtocolError(
                ErrorCode.BAD_CONFIG,
                f"transcription.prompt has at most {StreamConfig.MAX_PROMPT_CHARS} characters",
            )
        config = replace(
            self.config,
            prompt=prompt,
            language=language_tag(language, "transcription.language") if language else None,
        )
        try:
            check_decoding(config.decoding)
        except ValueError as exc:
            raise ProtocolError(ErrorCode.BAD_CONFIG, str(exc)) from None
        return replace(self, config=config)


def _turn_vad(turns: Any, base: VadConfig) -> VadConfig:
    if not isinstance(turns, dict) or turns.get("type") not in ("server_vad", "semantic_vad"):
        raise ProtocolError(
            ErrorCode.BAD_CONFIG,
            "turn_detection must be null or of type server_vad or semantic_vad",
        )
    return turn_detection(
        base,
        _ms(turns, "silence_duration_ms", base.min_silence_ms),
        _ms(turns, "prefix_padding_ms", base.speech_pad_ms),
    )


def _eagerness(turns: Any) -> str | None:
    """semantic_vad's ``eagerness`` (``auto`` unless given); None for server_vad or none."""
    if not isinstance(turns, dict) or turns.get("type") != "semantic_vad":
        return None
    eagerness = turns.get("eagerness") or "auto"
    if not isinstance(eagerness, str) or eagerness not in EAGERNESS:
        raise ProtocolError(
            ErrorCode.BAD_CONFIG,
            f"turn_detection.eagerness must be one of {', '.join(EAGERNESS)}",
        )
    return eagerness


def _audio_format(value: Any) -> dict:
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("type"), str)
        or value["type"] not in FORMATS
    ):
        raise ProtocolError(
            ErrorCode.BAD_CONFIG, f"audio.input.format.type must be one of {', '.join(FORMATS)}"
        )
    encoding = FORMATS[value["type"]]
    if encoding is Encoding.PCM_S16LE:
        rate = value.get("rate", PCM_RATE)
        if not isinstance(rate, int) or not StreamConfig.MIN_RATE <= rate <= StreamConfig.MAX_RATE:
            raise ProtocolError(
                ErrorCode.BAD_CONFIG,
                "audio.input.format.rate must be an integer sample rate (24000)",
            )
    else:
        rate = 8000
    return {"encoding": encoding, "sample_rate": rate, "channels": 1}


def _old_form(fields: dict) -> tuple[Any, Any, Any]:
    """transcription_session.update's fields → (format, transcription, turn_detection)."""
    audio_format = None
    if "input_audio_format" in fields:
        name = fields["input_audio_format"]
        if not isinstance(name, str) or name not in OLD_FORMATS:
            raise ProtocolError(
                ErrorCode.BAD_CONFIG, f"input_audio_format must be one of {', '.join(OLD_FORMATS)}"
            )
        kind, rate = OLD_FORMATS[name]
        audio_format = {"type": kind, "rate": rate}
    turns = fields["turn_detection"] if "turn_detection" in fields else ...
    return audio_format, fields.get("input_audio_transcription"), turns


def _ms(fields: dict, name: str, default: int) -> int:
    value = fields.get(name)
    if value is None:
        return default
    if not isinstance(value, int) or value < 0:
        raise ProtocolError(
            ErrorCode.BAD_CONFIG, f"turn_detection.{name} must be a non-negative integer"
        )
    return value
