"""/v1/listen: Deepgram's live streaming wire, over the same session as /v1/stream.

A bot built on Deepgram's SDKs (or LiveKit's and Pipecat's Deepgram plugins) moves to
Parley by changing its base URL. What is honoured, approximated and ignored is listed
in protocol.md, section 9; this module follows that table.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime

from websockets.datastructures import Headers

from parley import __version__
from parley.core.search import SearchWord
from parley.core.vad import VadConfig
from parley.protocol.messages import (
    Error,
    ErrorCode,
    Final,
    FinalReason,
    Partial,
    ProtocolError,
    ServerMessage,
    SessionEnded,
    SpeechStarted,
    Word,
)
from parley.protocol.paths import LISTEN_PATH
from parley.sessions.marks import Mark, Reply
from parley.sessions.session import Session
from parley.sessions.session_group import SessionGroup
from parley.sessions.streams import StreamFactory
from parley.transport.deepgram_channels import Channels
from parley.transport.deepgram_handshake import DeepgramHandshake
from parley.transport.deepgram_query import (
    ListenOptions,
    bare,
    endpointing_vad,
    listen_config,
    search_results,
)
from parley.transport.dialect import Opened, Setup, control_of


class DeepgramDialect(DeepgramHandshake):
    """Deepgram's live API on ``/v1/listen`` (protocol.md section 9)."""

    path = LISTEN_PATH

    def __init__(self, vad: VadConfig):
        self._vad = vad

    def setup(self, params: Mapping[str, str], headers: Headers) -> Setup[ListenOptions]:
        # Deepgram's callback: results also POSTed there (Parley signs them as webhooks).
        return Setup(
            listen_config(params),
            endpointing_vad(params, self._vad),
            params.get("callback"),
            options=ListenOptions.of(params),
        )

    def error(self, error: Error) -> str:
        return json.dumps(_error_message(error))

    def translator(
        self, opened: Opened[ListenOptions], streams: StreamFactory
    ) -> DeepgramTranslator:
        config, vad = opened.setup.config, opened.setup.vad
        if opened.setup.options.multichannel and config.channels > 1:
            return DeepgramTranslator(opened, streams.channels(replace(config, channels=1), vad))
        return DeepgramTranslator(opened, streams.single(config, vad))


def _search_words(start: float, end: float, text: str, words: list[Word]) -> list[SearchWord]:
    """A result's words as search reads them; an interim's (no word times) spread evenly
    over its span."""
    if words:
        return [SearchWord(w.word, w.start, w.end) for w in words]
    texts = text.split()
    step = (end - start) / max(len(texts), 1)
    return [SearchWord(t, start + k * step, start + (k + 1) * step) for k, t in enumerate(texts)]


def with_speakers(final: Final, last: str | None) -> list[Word]:
    """``final``'s words, each with a speaker where any is known. Deepgram gives every word
    of a diarized result one, and cannot revise a result as Parley's ``speaker_update``
    does: a word no speaker window has heard yet (a short turn, under load) takes its
    final's speaker, else ``last``, the one this channel's last word had."""
    fallback = final.speaker or last
    if fallback is None:
        return list(final.words)
    return [w if w.speaker is not None else replace(w, speaker=fallback) for w in final.words]


def _error_message(error: Error) -> dict:
    variant = "SchemaError" if error.code is ErrorCode.BAD_MESSAGE else error.code.value
    return {"type": "Error", "variant": variant, "description": error.message}


# The Reply a translator queues when utterance_end_ms of quiet has passed after a
# channel's last segment: sent as UtteranceEnd once every final before it has gone out.
UTTERANCE_END = "utterance_end"


class DeepgramTranslator:
    """One Deepgram connection: its messages to and from a Parley session."""

    def __init__(self, opened: Opened[ListenOptions], stream: Session | SessionGroup):
        self._opened = opened
        self._stream = stream
        self._channels = Channels(opened.setup.config, stream)
        self._options = opened.setup.options
        # Deepgram's extra: told back in every Results' and the Metadata's metadata.
        self._extra = {"extra": dict(self._options.extra)} if self._options.extra else {}
        self._request_id = str(uuid.UUID(hex=opened.session_id))
        self._created = datetime.now(UTC).isoformat(timespec="milliseconds")
        self._model_uuid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"parley:{opened.model}"))
        self._model_info = {"name": opened.model, "version": __version__, "arch": "whisper"}
        self._audio_sha256 = hashlib.sha256()
        # By channel: the quiet an UtteranceEnd was queued for; the last word since one.
        self._quiet_marked: dict[int, float] = {}
        self._last_word_end: dict[int, float] = {}
        self._last_speaker: dict[int, str] = {}  # by channel: the last word's speaker sent

    def opening(self) -> list[str]:
        return []  # Deepgram says nothing until there are results

    @property
    def stream(self) -> Session | SessionGroup:
        return self._stream

    async def receive(self, message: str | bytes) -> bool:
        if isinstance(message, bytes):
            if not message:
                return True  # Deepgram's older way to say CloseStream
            await self._channels.feed(message)
            self._audio_sha256.update(message)
            await self._maybe_utterance_end()
            return False
        kind, _ = control_of(message)
        if kind == "KeepAlive":
            return False
        if kind == "Finalize":
            await self._stream.finalize()
            return False
        if kind == "CloseStream":
            return True
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE,
            "expected a JSON message of type KeepAlive, "
            f"Finalize or CloseStream; got {message[:100]!r}",
        )

    async def _maybe_utterance_end(self) -> None:
        wait = self._options.utterance_end_s
        if wait is None:
            return
        for channel, session in enumerate(self._channels.sessions()):
            quiet = session.quiet_since
            if (
                quiet is not None
                and quiet != self._quiet_marked.get(channel)
                and session.stream_time - quiet >= wait
            ):
                self._quiet_marked[channel] = quiet
                await self._stream.mark(Reply(UTTERANCE_END, {"channel": channel}))

    def outbound(self, message: ServerMessage | Mark) -> list[str]:
        out = self._translate(message)
        return [json.dumps(m, ensure_ascii=False) for m in out]

    def _translate(self, message: ServerMessage | Mark) -> list[dict]:
        channel = self._channels.of(getattr(message, "segment_id", None))
        index = [channel, self._channels.count]  # channel_index: channel i of n
        if isinstance(message, Final):
            words = with_speakers(message, self._last_speaker.get(channel))
            if words:
                self._last_word_end[channel] = words[-1].end
                if words[-1].speaker is not None:
                    self._last_speaker[channel] = words[-1].speaker
            return [
                self._results(
                    message.start,
                    message.end,
                    message.text,
                    words,
                    is_final=True,
                    reason=message.reason,
                    language=message.language,
                    channel_index=index,
                )
            ]
        if isinstance(message, Partial):
            if not message.text.strip():
                return []
            return [
                self._results(
                    message.start,
                    message.end,
                    message.text,
                    [],
                    is_final=False,
                    reason=None,
                    language=message.language,
                    channel_index=index,
                    confidence=message.confidence,
                )
            ]
        if isinstance(message, SpeechStarted):
            if not self._options.vad_events:
                return []
            return [
                {"type": "SpeechStarted", "channel": index, "timestamp": round(message.start, 3)}
            ]
        if isinstance(message, Mark) and isinstance(message.payload, Reply):
            if message.payload.kind != UTTERANCE_END:
                return []
            channel = message.payload.data["channel"]
            last = self._last_word_end.pop(channel, None)
            if last is None:
                return []
            index = [channel, self._channels.count]
            return [{"type": "UtteranceEnd", "channel": index, "last_word_end": round(last, 3)}]
        if isinstance(message, SessionEnded):
            return [self._metadata(message.audio_duration)]
        if isinstance(message, Error):
            return [_error_message(message)]
        return []  # speaker_update (Deepgram cannot revise a result), finalized, marks

    def _results(
        self,
        start: float,
        end: float,
        text: str,
        words: list[Word],
        *,
        is_final: bool,
        reason: FinalReason | None,
        language: str | None,
        channel_index: list[int],
        confidence: float | None = None,
    ) -> dict:
        """A ``Results``; its ``confidence`` the words' mean probability, or, with no words
        (an interim's), the decode's ``confidence``."""
        if self._options.punctuate:
            transcript = text.strip()
        elif words:
            transcript = " ".join(filter(None, (bare(w.word) for w in words)))
        else:
            transcript = " ".join(filter(None, (bare(w) for w in text.split())))
        speech_final = self._options.endpointing and reason in (
            FinalReason.SILENCE,
            FinalReason.END_OF_STREAM,
        )
        alternative = {
            "transcript": transcript,
            "confidence": round(sum(w.probability for w in words) / len(words), 4)
            if words
            else round(confidence or 0.0, 4),
            "words": [self._word(w, language) for w in words],
        }
        if language is not None:
            alternative["languages"] = [language]  # as language=multi answers
        channel: dict = {"alternatives": [alternative]}
        if self._options.search:
            channel["search"] = search_results(
                self._options.search, _search_words(start, end, text, words)
            )
        return {
            "type": "Results",
            "channel_index": channel_index,
            "start": round(start, 3),
            "duration": round(end - start, 3),
            "is_final": is_final,
            "speech_final": speech_final,
            "from_finalize": reason is FinalReason.FINALIZE,
            "channel": channel,
            "metadata": {
                "request_id": self._request_id,
                "model_info": self._model_info,
                "model_uuid": self._model_uuid,
                **self._extra,
            },
        }

    def _word(self, word: Word, language: str | None) -> dict:
        out = {
            "word": bare(word.word),
            "start": round(word.start, 3),
            "end": round(word.end, 3),
            "confidence": round(word.probability, 4),
            "punctuated_word": word.word.strip(),
        }
        if language is not None:
            out["language"] = language
        if word.speaker is not None:
            out["speaker"] = int(word.speaker.lstrip("S")) - 1  # S1 → 0, as Deepgram counts
        return out

    def _metadata(self, duration: float) -> dict:
        return {
            "type": "Metadata",
            "transaction_key": "deprecated",
            "request_id": self._request_id,
            "sha256": self._audio_sha256.hexdigest(),
            "created": self._created,
            "duration": round(duration, 3),
            "channels": self._opened.setup.config.channels,
            "models": [self._model_uuid],
            "model_info": {self._model_uuid: self._model_info},
            **self._extra,
        }
