"""/v2/listen: Deepgram Flux's turn-based wire, over the same session as /v1/stream.

Flux tells a voice agent about turns, not segments: ``StartOfTurn`` when the user
begins, ``Update`` as the transcript grows, ``EndOfTurn`` when they are done, and, in
eager mode, ``EagerEndOfTurn`` (start preparing a reply) and ``TurnResumed`` (they
went on after all). Parley's turns are its VAD's: a turn ends with a final cut by
silence, unless speech has begun again by the time that final is decoded (or by
``ForceEndTurn``, or after ``eot_timeout_ms`` of quiet when ``eot_threshold`` is 1,
which leaves the ending to the client), and the eager end is the moment the VAD closes
the segment, before its final is decoded. What is honoured,
approximated and ignored is listed in protocol.md, section 9a.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace

from websockets.datastructures import Headers

from parley.core.keyterms import check_keyterms
from parley.protocol.messages import (
    Error,
    ErrorCode,
    Final,
    FinalReason,
    Partial,
    ProtocolError,
    SegmentEnded,
    ServerMessage,
    SpeechStarted,
)
from parley.protocol.paths import FLUX_PATH
from parley.protocol.stream_config import language_tag
from parley.sessions.marks import Mark, Reply
from parley.sessions.session import Session
from parley.sessions.streams import StreamFactory
from parley.transport.deepgram_handshake import DeepgramHandshake
from parley.transport.deepgram_query import listen_config
from parley.transport.dialect import Opened, Setup, control_of, every, number_in
from parley.transport.turn_state import (
    FORCED,
    QuietLimit,
    Turn,
    end_turn_now,
    reads_unfinished,
    turn_ends,
)

# Flux's own bounds on its turn settings (its End-of-Turn Configuration page).
EOT_THRESHOLD = (0.5, 1.0, 0.7)  # least, most, default
EAGER_EOT_THRESHOLD = (0.3, 0.9)
EOT_TIMEOUT_MS = (500, 60_000, 5000)
# The Replies a translator queues, each sent once every final before it has gone out:
TIMEOUT = "eot_timeout"  # a turn left to the client has been quiet eot_timeout_ms
CONFIGURED = "configure"  # Configure's answer
TICK = "tick"  # UPDATE_EVERY_S more of the open turn's audio has come
# Flux sends an Update for about every 0.25 s of a turn's audio, whether or not its
# transcript changed; a partial's new text goes at once, and ticks fill the gaps.
UPDATE_EVERY_S = 0.25
ENDS_A_TURN = (FinalReason.SILENCE, FinalReason.END_OF_STREAM)


@dataclass(frozen=True)
class TurnSettings:
    """A connection's end-of-turn settings (``Configure`` changes them)."""

    eot_threshold: float = EOT_THRESHOLD[2]
    eager_eot_threshold: float | None = None  # None: no eager events
    eot_timeout_ms: int = EOT_TIMEOUT_MS[2]

    @classmethod
    def of(cls, given: Mapping[str, object], base: TurnSettings | None = None) -> TurnSettings:
        """``base`` with what ``given`` sets (query values or Configure's numbers);
        ProtocolError(bad_config) for a value out of Flux's ranges."""
        settings = base or cls()
        values: dict[str, float] = {}
        for name, (least, most) in (
            ("eot_threshold", EOT_THRESHOLD[:2]),
            ("eager_eot_threshold", EAGER_EOT_THRESHOLD),
            ("eot_timeout_ms", EOT_TIMEOUT_MS[:2]),
        ):
            raw = given.get(name)
            if raw is not None:
                values[name] = number_in(raw, least, most, name)
        eager = values.get("eager_eot_threshold", settings.eager_eot_threshold)
        eot = values.get("eot_threshold", settings.eot_threshold)
        if eager is not None and eager > eot:
            # as Flux's clients check it: an eager end can only come before the end
            raise ProtocolError(
                ErrorCode.BAD_CONFIG, "eager_eot_threshold must be at most eot_threshold"
            )
        return cls(eot, eager, int(values.get("eot_timeout_ms", settings.eot_timeout_ms)))


class FluxDialect(DeepgramHandshake):
    """Deepgram Flux on ``/v2/listen`` (protocol.md section 9a): keys and refusals as on
    ``/v1/listen``."""

    path = FLUX_PATH

    def setup(self, params: Mapping[str, str], headers: Headers) -> Setup[TurnSettings]:
        config = replace(listen_config(params), partials=True, diarization=False)
        hints = tuple(language_tag(h, "language_hint") for h in every(params, "language_hint"))
        if "multi" in params.get("model", ""):
            config = replace(config, language=None, languages=hints)
        else:  # flux-general-en
            config = replace(config, language="en", languages=())
        return Setup(config, None, None, options=TurnSettings.of(params))

    def error(self, error: Error) -> str:
        # A fatal error is the endpoint's, outside the connection's numbering.
        return json.dumps({**_error(error), "sequence_id": 0})

    def translator(self, opened: Opened[TurnSettings], streams: StreamFactory) -> FluxTranslator:
        return FluxTranslator(opened, streams.single(opened.setup.config, opened.setup.vad))


def _error(error: Error) -> dict:
    return {"type": "Error", "code": error.code.value.upper(), "description": error.message}


class FluxTranslator:
    """One Flux connection: its turn's state, its messages to and from a session."""

    def __init__(self, opened: Opened[TurnSettings], stream: Session):
        self._stream = stream
        self._settings = opened.setup.options
        self._request_id = opened.session_id
        self._sequence = 0
        self._turn = Turn()
        self._detects = opened.setup.config.language is None  # flux-general-multi
        self._eager: str | None = None  # the transcript an EagerEndOfTurn gave
        self._quiet = QuietLimit(TIMEOUT)
        self._ticked_at = 0.0  # stream time of the last TICK queued
        self._told_at = 0.0  # audio_window_end of the last TurnInfo sent

    @property
    def stream(self) -> Session:
        return self._stream

    def opening(self) -> list[str]:
        return [self._send({"type": "Connected", "request_id": self._request_id})]

    async def receive(self, message: str | bytes) -> bool:
        if isinstance(message, bytes):
            await self._stream.feed(message)
            await self._maybe_timeout()
            await self._maybe_tick()
            return False
        kind, data = control_of(message)
        if kind == "CloseStream":
            return True
        if kind == "ForceEndTurn":
            await end_turn_now(self._stream)
            return False
        if kind == "Configure":
            await self._stream.mark(Reply(CONFIGURED, self._configure(data)))
            return False
        if kind == "KeepAlive":
            return False
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE,
            "expected audio, or a JSON message of type CloseStream, ForceEndTurn or "
            f"Configure; got {message[:100]!r}",
        )

    def _configure(self, data: dict) -> dict:
        """Configure's new thresholds and keyterms, as its answer will say them."""
        try:
            thresholds = data.get("thresholds") or {}
            if not isinstance(thresholds, dict):
                raise ProtocolError(ErrorCode.BAD_CONFIG, "thresholds must be a JSON object")
            settings = TurnSettings.of(thresholds, self._settings)
            keyterms = data.get("keyterms")
            config = self._stream.config
            if keyterms is not None:
                if not isinstance(keyterms, list) or not all(isinstance(k, str) for k in keyterms):
                    raise ProtocolError(ErrorCode.BAD_CONFIG, "keyterms must be a list of strings")
                config = replace(config, keyterms=check_keyterms(keyterms))
                self._stream.reconfigure(config)
        except (ProtocolError, ValueError) as exc:
            message = exc.message if isinstance(exc, ProtocolError) else str(exc)
            return {
                "type": "ConfigureFailure",
                "code": "INVALID_CONFIGURATION",
                "description": message,
            }
        self._settings = settings
        return {
            "type": "ConfigureSuccess",
            "thresholds": {
                "eot_threshold": settings.eot_threshold,
                "eager_eot_threshold": settings.eager_eot_threshold,
                "eot_timeout_ms": settings.eot_timeout_ms,
            },
            "keyterms": list(config.keyterms),
        }

    async def _maybe_timeout(self) -> None:
        """Once an open turn (one only the client may end, or one whose text read
        unfinished at its pause) has been quiet eot_timeout_ms, queue its end."""
        await self._quiet.check(self._stream, self._turn.open, self._settings.eot_timeout_ms / 1000)

    async def _maybe_tick(self) -> None:
        """While a turn is open (as the client has been told), queue a TICK for each
        UPDATE_EVERY_S of audio: an Update goes out for it if nothing else did."""
        now = self._stream.stream_time
        if self._turn.open and now - self._ticked_at >= UPDATE_EVERY_S:
            self._ticked_at = now
            await self._stream.mark(Reply(TICK, {}))

    def outbound(self, message: ServerMessage | Mark) -> list[str]:
        return [self._send(m) for m in self._translate(message)]

    def _send(self, message: dict) -> str:
        message = {**message, "request_id": self._request_id, "sequence_id": self._sequence}
        self._sequence += 1
        return json.dumps(message, ensure_ascii=False)

    def _translate(self, message: ServerMessage | Mark) -> list[dict]:
        if isinstance(message, SpeechStarted):
            if self._turn.open:
                return []
            self._turn.begin(message.start)
            return [self._turn_info("StartOfTurn", message.start)]
        if isinstance(message, Partial) and self._turn.open and message.text.strip():
            self._turn.heard_partial(message)
            return [self._turn_info("Update", message.end)]
        if isinstance(message, SegmentEnded) and self._eager_due(message.reason):
            self._eager = self._turn.transcript()
            return [self._turn_info("EagerEndOfTurn", message.end)]
        if isinstance(message, Final) and self._turn.open:
            return self._final(message)
        if isinstance(message, Mark) and isinstance(message.payload, Reply):
            kind = message.payload.kind
            if kind == TICK:
                return self._tick(message.stream_time)
            if kind in (TIMEOUT, FORCED) and self._turn.open:
                return self._end(message.stream_time, "timeout" if kind == TIMEOUT else "manual")
            return [message.payload.data] if kind == CONFIGURED else []
        if isinstance(message, Error):
            return [_error(message)]
        return []  # speaker_update, finalized, session_ended (the close follows)

    def _tick(self, at: float) -> list[dict]:
        """An Update of the open turn as it stands, where none went out for
        UPDATE_EVERY_S of audio (none once an EagerEndOfTurn has been sent: its
        transcript stands until the turn ends or resumes)."""
        if not self._turn.open or self._eager is not None or at - self._told_at < UPDATE_EVERY_S:
            return []
        return [self._turn_info("Update", at)]

    def _eager_due(self, reason: FinalReason) -> bool:
        eager = self._settings.eager_eot_threshold
        return (
            self._turn.open
            and eager is not None
            and self._settings.eot_threshold < 1.0
            and reason in ENDS_A_TURN
            and bool(self._turn.transcript())
            and self._turn.completion() >= eager
        )

    def _final(self, final: Final) -> list[dict]:
        self._turn.heard(final)
        threshold = self._settings.eot_threshold
        if turn_ends(final, self._stream, silence_ends=threshold < 1.0) and not reads_unfinished(
            self._turn, final, threshold
        ):
            return self._end(final.end, "model")
        if self._eager is not None:  # the eager end taken back: they spoke again
            self._eager = None
            return [self._turn_info("TurnResumed", final.end)]
        return [self._turn_info("Update", final.end)]

    def _end(self, at: float, trigger: str) -> list[dict]:
        """EndOfTurn. In eager mode a turn the model ends goes through EagerEndOfTurn with
        the same transcript first: sent now if none was (no partial had text when the
        segment closed), or again after a TurnResumed where the final changed it."""
        out = []
        transcript = self._turn.transcript()
        eager = trigger == "model" and self._settings.eager_eot_threshold is not None
        if eager and transcript and self._eager != transcript:
            if self._eager is not None:
                out.append(self._turn_info("TurnResumed", at))
            out.append(self._turn_info("EagerEndOfTurn", at))
        out.append({**self._turn_info("EndOfTurn", at), "trigger": trigger})
        self._turn.finish()
        self._eager = None
        return out

    def _turn_info(self, event: str, at: float) -> dict:
        turn = self._turn
        self._told_at = max(at, turn.start)
        # how finished the turn's text reads so far (an eager end's is at least its
        # threshold); an end, once declared, is sure
        if event == "EndOfTurn":
            confidence = 1.0
        elif event == "StartOfTurn" or not turn.transcript():
            confidence = 0.0
        else:
            confidence = turn.completion()
        return {
            "type": "TurnInfo",
            "event": event,
            "turn_index": turn.index,
            "audio_window_start": round(turn.start, 3),
            "audio_window_end": round(max(at, turn.start), 3),
            "transcript": turn.transcript(),
            "words": [
                {
                    "word": w.word.strip(),
                    "confidence": round(w.probability, 4),
                    "start": round(w.start, 3),
                    "end": round(w.end, 3),
                }
                for w in turn.words
            ]
            # a partial's words have no times, and the partial's confidence
            + [
                {"word": word, "confidence": turn.partial_confidence}
                for word in turn.partial.split()
            ],
            "end_of_turn_confidence": confidence,
            # flux-general-multi's: the turn's languages, most heard first
            **(
                {"languages": [lang for lang, _ in turn.languages.most_common()]}
                if self._detects
                else {}
            ),
        }
