"""/v3/ws: AssemblyAI's Universal-Streaming (v3) wire, over the same session as
/v1/stream.

AssemblyAI tells its client about turns: each ``Turn`` message carries every word of
the turn so far, those that will not change marked ``word_is_final``, its ``transcript``
(the final words) and, once the turn is over, ``end_of_turn``; with ``format_turns`` a
second ``Turn`` then gives the formatted text. Parley's turns are those of the Flux
wire (transport/turn_state.py): a turn ends with a final cut by the VAD's silence,
unless speech has begun again by the time it is decoded, or on ``ForceEndpoint``. A
``speaker_update`` of a final already sent is told as a ``SpeakerRevision`` of its turn
(transport/speaker_revision.py). What is honoured, approximated and ignored is listed in
protocol.md, section 10a.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import replace

from websockets.datastructures import Headers
from websockets.http11 import Response

from parley.core.keyterms import check_keyterms
from parley.core.vad import VadConfig
from parley.protocol.messages import (
    Error,
    ErrorCode,
    Final,
    Partial,
    ProtocolError,
    ServerMessage,
    SessionEnded,
    SpeakerUpdate,
    SpeechStarted,
    StreamConfig,
    Word,
)
from parley.protocol.paths import ASSEMBLYAI_PATH
from parley.protocol.stream_config import bool_param
from parley.sessions.marks import Mark, Reply
from parley.sessions.session import Session
from parley.sessions.streams import StreamFactory
from parley.transport.assemblyai_turns import LONGEST_QUIET, TurnOptions
from parley.transport.deepgram_query import bare
from parley.transport.dialect import KeyOffered, Opened, Setup, control_of, turn_detection
from parley.transport.http import json_response, refusal_status
from parley.transport.native import bearer_or_token
from parley.transport.speaker_revision import RevisedTurns, most_heard
from parley.transport.turn_state import (
    FORCED,
    QuietLimit,
    Turn,
    end_turn_now,
    reads_unfinished,
    turn_ends,
)

ENCODINGS = {"pcm_s16le": "pcm_s16le", "pcm_mulaw": "mulaw"}


def keyterms_prompt(raw: object) -> tuple[str, ...]:
    """``keyterms_prompt``: a JSON list of strings (as a query value, or in
    UpdateConfiguration); ProtocolError(bad_config) for anything else or past the bounds."""
    try:
        terms = json.loads(raw) if isinstance(raw, str) else raw
        if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
            raise ValueError("keyterms_prompt must be a JSON list of strings")
        return check_keyterms(terms)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(ErrorCode.BAD_CONFIG, str(exc)) from None


class AssemblyAIDialect(KeyOffered):
    """AssemblyAI's Universal-Streaming v3 on ``/v3/ws`` (protocol.md section 10a)."""

    path = ASSEMBLYAI_PATH
    resumable = False

    def __init__(self, vad: VadConfig):
        self._vad = vad

    @staticmethod
    def offered_key(params: Mapping[str, str], headers: Headers) -> str | None:
        # AssemblyAI's SDKs send the key itself as Authorization; browsers a ?token=.
        offered = bearer_or_token(headers) or headers.get("Authorization", "").strip()
        return offered or params.get("token")

    def subprotocol(self, offered: list[str]) -> str | None:
        return None

    def setup(self, params: Mapping[str, str], headers: Headers) -> Setup[TurnOptions]:
        encoding = ENCODINGS.get(params.get("encoding", "pcm_s16le"))
        if encoding is None or "sample_rate" not in params:
            raise ProtocolError(
                ErrorCode.BAD_CONFIG,
                f"encoding must be one of {', '.join(ENCODINGS)}, with its sample_rate",
            )
        multilingual = "multilingual" in params.get("speech_model", "") or bool_param(
            params, "language_detection", False
        )
        diarized = bool_param(params, "speaker_labels", False)
        native = {
            "encoding": encoding,
            "sample_rate": params["sample_rate"],
            "partials": "true",
            "diarization": str(diarized).lower(),
        }
        if diarized and params.get("max_speakers"):  # without speaker_labels, it says nothing
            native["max_speakers"] = params["max_speakers"]
        if params.get("prompt"):  # context for the decoder, as OpenAI's prompt is
            native["prompt"] = params["prompt"]
        if bool_param(params, "filter_profanity", False):  # masked in partials and finals
            native["profanity_filter"] = "true"
        if not multilingual:
            native["language"] = "en"
        config = StreamConfig.from_query(native)
        if params.get("keyterms_prompt"):
            config = replace(config, keyterms=keyterms_prompt(params["keyterms_prompt"]))
        silence = params.get("min_turn_silence") or params.get(
            "min_end_of_turn_silence_when_confident"
        )
        vad = None
        if silence is not None:
            if not (silence.isascii() and silence.isdigit()):  # '¹' is a digit to isdigit
                raise ProtocolError(ErrorCode.BAD_CONFIG, "min_turn_silence is whole ms")
            vad = turn_detection(self._vad, int(silence))
        options = TurnOptions(bool_param(params, "format_turns", False)).updated(params)
        return Setup(config, vad, None, options=options)

    def refusal(self, error: Error) -> Response:
        return json_response(refusal_status(error.code), {"error": error.message})

    def error(self, error: Error) -> str:
        return json.dumps({"type": "Error", "error": error.message})

    def translator(
        self, opened: Opened[TurnOptions], streams: StreamFactory
    ) -> AssemblyAITranslator:
        return AssemblyAITranslator(opened, streams.single(opened.setup.config, opened.setup.vad))


def speaker_letter(label: str | None) -> str | None:
    """Parley's S1, S2… as AssemblyAI's A, B…"""
    if label is None or not label[1:].isdigit():
        return None
    index = int(label[1:]) - 1
    return chr(ord("A") + index) if 0 <= index < 26 else label


class AssemblyAITranslator:
    """One /v3/ws connection: its turn, its messages to and from a session."""

    def __init__(self, opened: Opened[TurnOptions], stream: Session):
        self._stream = stream
        self._opened = opened
        self._turn = Turn()
        self._revised = RevisedTurns()
        self._partial_span = (0.0, 0.0)
        self._started = time.monotonic()
        self._options = opened.setup.options
        self._quiet = QuietLimit(LONGEST_QUIET)

    @property
    def stream(self) -> Session:
        return self._stream

    def opening(self) -> list[str]:
        lasts = float(self._opened.limits.get("max_session_s", 0))
        expires = int(time.time() + lasts)
        return [json.dumps({"type": "Begin", "id": self._opened.session_id, "expires_at": expires})]

    async def receive(self, message: str | bytes) -> bool:
        if isinstance(message, bytes):
            await self._stream.feed(message)
            # a turn whose text read unfinished at its pause ends after the longest quiet
            limit_s = self._options.max_turn_silence_ms / 1000
            await self._quiet.check(self._stream, self._turn.open, limit_s)
            return False
        kind, data = control_of(message)
        if kind == "Terminate":
            return True
        if kind == "ForceEndpoint":
            await end_turn_now(self._stream)
            return False
        if kind == "UpdateConfiguration":
            options = self._options.updated(data)
            if data.get("keyterms_prompt") is not None:
                terms = keyterms_prompt(data["keyterms_prompt"])
                self._stream.reconfigure(replace(self._stream.config, keyterms=terms))
            self._options = options
            return False
        if kind == "KeepAlive":
            return False
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE,
            "expected audio, or a JSON message of type Terminate, ForceEndpoint, "
            f"UpdateConfiguration or KeepAlive; got {message[:100]!r}",
        )

    def outbound(self, message: ServerMessage | Mark) -> list[str]:
        if isinstance(message, SpeakerUpdate):
            self._revise(message)
            return []
        out = self._revision() + self._translate(message)
        return [json.dumps(m, ensure_ascii=False) for m in out]

    def _revise(self, update: SpeakerUpdate) -> None:
        turn = self._revised.revise(update)
        if turn is not None and turn == self._turn.index and self._turn.open:
            self._turn.words = self._revised.words(turn)  # its next Turn says them too

    def _revision(self) -> list[dict]:
        """The turns revised since the last message, as one SpeakerRevision."""
        turns = self._revised.take()
        if not turns:
            return []
        revisions = []
        for turn in turns:
            words = self._revised.words(turn)
            revisions.append(
                {
                    "turn_order": turn,
                    "speaker_label": speaker_letter(most_heard(words)) or "UNKNOWN",
                    "words": [self._word(w) for w in words],
                }
            )
        return [{"type": "SpeakerRevision", "revisions": revisions}]

    def _translate(self, message: ServerMessage | Mark) -> list[dict]:
        turn = self._turn
        if isinstance(message, SpeechStarted):
            if turn.open:
                return []
            turn.begin(message.start)
            return [{"type": "SpeechStarted", "timestamp": round(message.start * 1000)}]
        if isinstance(message, Partial) and turn.open and message.text.strip():
            turn.heard_partial(message)
            self._partial_span = message.start, message.end
            return [self._turn_message()]
        if isinstance(message, Final) and turn.open:
            turn.heard(message)
            if message.text.strip() and self._opened.setup.config.diarization:
                self._revised.heard(turn.index, message)
            utterance = message.text.strip()
            threshold = self._options.end_of_turn_confidence_threshold
            if turn_ends(message, self._stream) and not reads_unfinished(turn, message, threshold):
                return self._end(utterance)
            return [self._turn_message(utterance=utterance)]
        if isinstance(message, Mark) and isinstance(message.payload, Reply):
            ends = message.payload.kind in (FORCED, LONGEST_QUIET)
            return self._end("") if ends and turn.open else []
        if isinstance(message, SessionEnded):
            return [
                {
                    "type": "Termination",
                    "audio_duration_seconds": round(message.audio_duration),
                    "session_duration_seconds": round(time.monotonic() - self._started),
                }
            ]
        if isinstance(message, Error):
            return [{"type": "Error", "error": message.message}]
        return []  # segment_ended, finalized

    def _end(self, utterance: str) -> list[dict]:
        """The turn's last Turn (and, with format_turns, its formatted one)."""
        out = [self._turn_message(utterance=utterance, end=True)]
        if self._opened.setup.options.format_turns:
            out.append(self._turn_message(end=True, formatted=True))
        self._turn.finish()
        return out

    def _turn_message(
        self, utterance: str = "", end: bool = False, formatted: bool = False
    ) -> dict:
        turn = self._turn
        words = [self._word(w) for w in turn.words]
        partial = turn.partial.split()
        start, stop = self._partial_span
        step = (stop - start) / max(len(partial), 1)
        words += [  # a partial's words have no times: spread over its span
            {
                "start": round((start + k * step) * 1000),
                "end": round((start + (k + 1) * step) * 1000),
                "confidence": turn.partial_confidence,
                "text": text,
                "word_is_final": False,
            }
            for k, text in enumerate(partial)
        ]
        transcript = (
            " ".join(turn.texts)
            if formatted
            else " ".join(filter(None, (bare(w.word) for w in turn.words)))
        )
        out: dict = {
            "type": "Turn",
            "turn_order": turn.index,
            "turn_is_formatted": formatted,
            "end_of_turn": end,
            "transcript": transcript,
            # how finished the turn's text reads so far; an end, once declared, is sure
            "end_of_turn_confidence": 1.0 if end else turn.completion() if transcript else 0.0,
            "words": words,
            "utterance": utterance,
        }
        if turn.languages:
            out["language_code"] = turn.languages.most_common(1)[0][0]
        if self._opened.setup.config.diarization:  # the turn's most heard voice
            out["speaker_label"] = speaker_letter(most_heard(turn.words)) or "UNKNOWN"
        return out

    @staticmethod
    def _word(word: Word) -> dict:
        out = {
            "start": round(word.start * 1000),
            "end": round(word.end * 1000),
            "confidence": round(word.probability, 4),
            "text": word.word.strip(),
            "word_is_final": True,
        }
        if word.speaker is not None:
            out["speaker"] = speaker_letter(word.speaker)
        return out
