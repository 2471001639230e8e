"""WhisperLive's wire on ``/``: its clients (the ``whisper_live`` package's ``Client``,
and the browser extensions and apps built on its protocol) connect to ``ws://HOST:PORT``
with no path, send their options as the first message, then audio (float32 samples at
16 kHz unless ``audio_format`` says ``int16``), and ``END_OF_AUDIO`` at the end.

Parley answers as WhisperLive's server does: ``SERVER_READY`` once the options are
read, then after every partial and final the stream's last ``send_last_n_segments``
completed segments and, while a segment is open, its partial as the last, uncompleted
one. protocol.md section 10b is the contract.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping
from typing import Any

from websockets.datastructures import Headers

from parley.protocol.messages import (
    Encoding,
    EndReason,
    Error,
    ErrorCode,
    Final,
    Partial,
    ProtocolError,
    ServerMessage,
    SessionEnded,
    StreamConfig,
)
from parley.protocol.paths import WHISPERLIVE_PATH
from parley.sessions.marks import Mark, Reply
from parley.sessions.session import Session
from parley.sessions.streams import StreamFactory
from parley.transport.dialect import Opened, Setup
from parley.transport.native import ParleyKeysAndErrors

END_OF_AUDIO = b"END_OF_AUDIO"
# WhisperLive's client keeps the completed segments of a server that names this backend
# (its segments are shaped as that backend's); any other name and it keeps none.
BACKEND = "faster_whisper"
AUDIO_FORMATS = {"float32": Encoding.PCM_F32LE, "int16": Encoding.PCM_S16LE}
MAX_LAST_SEGMENTS = 100  # the most send_last_n_segments may ask for
# Options WhisperLive's server reads and Parley serves otherwise, or not at all: said
# once in a WARNING, the stream going on without them.
NOT_SERVED = {
    "enable_diarization": "speaker labels are chosen when a stream connects, which "
    "WhisperLive's options come too late for: use /v1/stream?diarization=true",
    "enable_translation": "translation into a chosen language is not served: Whisper's own "
    "translation into English is task=translate",
}
READY = "ready"  # the Reply kind that sends SERVER_READY, behind the reconfiguration


class WhisperLiveDialect(ParleyKeysAndErrors):
    """WhisperLive's wire on ``/`` (protocol.md section 10b); Parley's keys as on
    /v1/stream (WhisperLive's own clients offer none)."""

    path = WHISPERLIVE_PATH
    resumable = False

    def setup(self, params: Mapping[str, str], headers: Headers) -> Setup[None]:
        return Setup(StreamConfig(encoding=AUDIO_FORMATS["float32"]), options=None)

    def error(self, error: Error) -> str:
        return json.dumps({"uid": None, "status": "ERROR", "message": error.message})

    def translator(self, opened: Opened[None], streams: StreamFactory) -> WhisperLiveTranslator:
        return WhisperLiveTranslator(opened, streams.single(opened.setup.config, opened.setup.vad))


def options_config(options: dict[str, Any], base: StreamConfig) -> StreamConfig:
    """The stream's settings from WhisperLive's options: ``audio_format``, ``language``,
    ``task``, and ``hotwords`` then ``initial_prompt`` as the prompt (faster-whisper
    puts hotwords in its prompt); ProtocolError for what is not acceptable."""
    audio_format = options.get("audio_format") or "float32"
    if not isinstance(audio_format, str) or audio_format not in AUDIO_FORMATS:
        raise ProtocolError(
            ErrorCode.BAD_CONFIG, f"audio_format must be float32 or int16, not {audio_format!r}"
        )
    words = [options.get(name) for name in ("hotwords", "initial_prompt")]
    if not all(w is None or isinstance(w, str) for w in words):
        raise ProtocolError(ErrorCode.BAD_CONFIG, "hotwords and initial_prompt must be strings")
    language, task = options.get("language"), options.get("task") or "transcribe"
    if not (language is None or isinstance(language, str)) or not isinstance(task, str):
        raise ProtocolError(ErrorCode.BAD_CONFIG, "language and task must be strings")
    query = {
        **base.to_query(),
        "encoding": AUDIO_FORMATS[audio_format].value,
        "task": task,
        "prompt": " ".join(w.strip() for w in words if w and w.strip()),
    }
    if language:
        query["language"] = language
    return StreamConfig.from_query(query)


def last_segments(options: dict[str, Any]) -> int:
    """How many completed segments each message carries (``send_last_n_segments``)."""
    count = options.get("send_last_n_segments", 10)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_LAST_SEGMENTS:
        raise ProtocolError(
            ErrorCode.BAD_CONFIG, f"send_last_n_segments must be 1 to {MAX_LAST_SEGMENTS}"
        )
    return count


class WhisperLiveTranslator:
    """One WhisperLive client: its options, then its audio, to one session; the
    session's partials and finals as WhisperLive's segment lists."""

    def __init__(self, opened: Opened[None], session: Session):
        self._opened = opened
        self._session = session
        self._uid: str | None = None  # the client's, from its options
        self._ready = False  # its options read and applied
        self._words = False  # word_timestamps
        self._completed: deque[dict] = deque(maxlen=10)
        self._told_language = False

    @property
    def stream(self) -> Session:
        return self._session

    def opening(self) -> list[str]:
        return []  # SERVER_READY answers the options

    async def receive(self, message: str | bytes) -> bool:
        if message in (END_OF_AUDIO, END_OF_AUDIO.decode()):
            return True
        if not self._ready:
            await self._options(message)
            return False
        if isinstance(message, str):
            raise ProtocolError(
                ErrorCode.BAD_MESSAGE,
                "after the options WhisperLive sends audio, then END_OF_AUDIO",
            )
        await self._session.feed(message)
        return False

    async def _options(self, message: str | bytes) -> None:
        try:
            options = json.loads(message) if isinstance(message, str) else None
        except (ValueError, RecursionError):
            options = None
        if not isinstance(options, dict) or not isinstance(options.get("uid"), str):
            raise ProtocolError(
                ErrorCode.BAD_MESSAGE,
                'WhisperLive begins with its options: a JSON object with a string "uid"',
            )
        self._uid = options["uid"]  # on the errors too, which its client reads by it
        config = options_config(options, self._session.config)
        try:
            self._opened.check_decoding(config.decoding)
        except ValueError as exc:
            raise ProtocolError(ErrorCode.BAD_CONFIG, str(exc)) from None
        self._completed = deque(maxlen=last_segments(options))
        self._session.reconfigure(config)
        self._words = options.get("word_timestamps") is True
        self._ready = True
        await self._session.mark(Reply(READY))
        for name, why in NOT_SERVED.items():
            if options.get(name):
                await self._session.mark(Reply("warning", {"message": f"{name}: {why}"}))

    def outbound(self, message: ServerMessage | Mark) -> list[str]:
        if isinstance(message, Mark):
            return self._reply(message.payload)
        if isinstance(message, Final):
            out = self._language(message)
            if message.text:
                self._completed.append(self._segment(message, completed=True))
            return out + [self._send({"segments": list(self._completed)})]
        if isinstance(message, Partial) and message.text:
            open_segment = self._segment(message, completed=False)
            return [self._send({"segments": [*self._completed, open_segment]})]
        if isinstance(message, Error):  # not fatal: before the options, nothing can go on
            status = "WARNING" if self._ready else "ERROR"
            return [self._send({"status": status, "message": message.message})]
        if isinstance(message, SessionEnded) and message.reason is not EndReason.END_OF_STREAM:
            return [self._send({"message": "DISCONNECT"})]  # the server ended it: no retry
        return []

    def _reply(self, payload: object) -> list[str]:
        if not isinstance(payload, Reply):
            return []
        if payload.kind == READY:
            return [self._send({"message": "SERVER_READY", "backend": BACKEND})]
        return [self._send({"status": "WARNING", **payload.data})]

    def _language(self, final: Final) -> list[str]:
        """WhisperLive tells a detected language once, before the segments in it."""
        if self._told_language or self._session.config.language or final.language is None:
            return []
        self._told_language = True
        return [
            self._send({"language": final.language, "language_prob": final.language_probability})
        ]

    def _segment(self, message: Final | Partial, completed: bool) -> dict:
        segment: dict[str, Any] = {
            "start": f"{message.start:.3f}",
            "end": f"{message.end:.3f}",
            "text": message.text,
            "completed": completed,
        }
        if isinstance(message, Final):
            if message.speaker is not None:
                segment["speaker"] = message.speaker
            if self._words:
                segment["words"] = [
                    {
                        "word": w.word,
                        "start": f"{w.start:.3f}",
                        "end": f"{w.end:.3f}",
                        "probability": round(w.probability, 4),
                    }
                    for w in message.words
                ]
        return segment

    def _send(self, data: dict) -> str:
        return json.dumps({"uid": self._uid, **data})
