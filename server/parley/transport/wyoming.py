"""Home Assistant's Wyoming protocol (protocol.md section 10c): a voice command's audio
in, its transcript out, streamed as its finals come.

A client (Home Assistant's Wyoming integration, a satellite, any user of the ``wyoming``
package) sends ``transcribe``, ``audio-start``, audio chunks and ``audio-stop``, and
reads ``transcript-start``, a ``transcript-chunk`` for each final, then ``transcript``
(the whole text, for clients that do not stream) and ``transcript-stop``. ``describe``
is answered with ``info``: the model and its languages. The listener
(wyoming_listener.py) opens the session once the audio's format is known, with the
settings the events before it gave as the session's query; this dialect serves it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from websockets.datastructures import Headers
from websockets.http11 import Request
from wyoming.asr import Transcript, TranscriptChunk, TranscriptStart, TranscriptStop
from wyoming.error import Error as WyomingError
from wyoming.event import Event
from wyoming.info import AsrModel, AsrProgram, Attribution, Info
from wyoming.ping import Pong

from parley import __version__
from parley.protocol.messages import (
    Error,
    ErrorCode,
    Final,
    ProtocolError,
    ServerMessage,
    SessionEnded,
    StreamConfig,
)
from parley.protocol.paths import WYOMING_PATH
from parley.sessions.marks import Mark, Reply
from parley.sessions.session import Session
from parley.sessions.streams import StreamFactory
from parley.transport.auth import ANONYMOUS, ApiKeys
from parley.transport.dialect import Opened, Setup, control_of
from parley.transport.wyoming_wire import AUDIO_CHUNK, as_text

PROGRAM = "parley"
WHISPER = Attribution(name="OpenAI Whisper", url="https://github.com/openai/whisper")
DESCRIBE, PING = "describe", "ping"  # asked again during a stream: answered in order


def info_event(model: str, languages: Sequence[str]) -> Event:
    """``info``: one speech-to-text program, streaming its transcripts, with one model."""
    whisper = AsrModel(
        name=model,
        attribution=WHISPER,
        installed=True,
        description=f"Whisper {model}",
        version=None,
        languages=list(languages),
    )
    program = AsrProgram(
        name=PROGRAM,
        attribution=Attribution(name="Parley", url=""),
        installed=True,
        description="Parley: Whisper with speculative decoding",
        version=__version__,
        models=[whisper],
        supports_transcript_streaming=True,
    )
    return Info(asr=[program]).event()


def pong(data: dict) -> Event:
    text = data.get("text")
    return Pong(text=text if isinstance(text, str) else None).event()


class WyomingDialect:
    """Sessions of the Wyoming listener, which no WebSocket reaches. Wyoming carries no
    credentials: on a server with keys, its clients stream as the key ``key`` names."""

    path = WYOMING_PATH
    resumable = False

    def __init__(self, key: str | None):
        self._key = key

    def identify(self, request: Request, params: Mapping[str, str], keys: ApiKeys) -> str | None:
        if not keys.required:
            return ANONYMOUS
        return self._key if self._key in keys.names else None

    def setup(self, params: Mapping[str, str], headers: Headers) -> Setup[None]:
        return Setup(StreamConfig.from_query(params), options=None)

    def subprotocol(self, offered: list[str]) -> str | None:
        return None

    def error(self, error: Error) -> str:
        return as_text(WyomingError(text=error.message, code=error.code.value).event())

    def translator(self, opened: Opened[None], streams: StreamFactory) -> WyomingTranslator:
        return WyomingTranslator(opened, streams.single(opened.setup.config, opened.setup.vad))


class WyomingTranslator:
    """One voice command: its events to the session; its finals as transcript chunks, and
    at its end the whole transcript."""

    def __init__(self, opened: Opened[None], session: Session):
        self._opened = opened
        self._session = session
        self._texts: list[str] = []
        self._language = opened.setup.config.language  # asked for, else the last detected
        self._started = False  # transcript-start sent

    @property
    def stream(self) -> Session:
        return self._session

    def opening(self) -> list[str]:
        return []

    async def receive(self, message: str | bytes) -> bool:
        if isinstance(message, bytes):
            await self._session.feed(message)
            return False
        kind, event = control_of(message)
        data = event.get("data")
        data = data if isinstance(data, dict) else {}
        if kind == "audio-stop":
            return True
        if kind == AUDIO_CHUNK:
            raise ProtocolError(
                ErrorCode.BAD_MESSAGE,
                f"an audio-chunk of rate {data.get('rate')}, width {data.get('width')} and "
                f"{data.get('channels')} channel(s) in a stream that began otherwise: dropped",
            )
        if kind in (DESCRIBE, PING):
            await self._session.mark(Reply(kind, data))
        return False  # anything else is dropped, as Wyoming asks of servers

    def outbound(self, message: ServerMessage | Mark) -> list[str]:
        if isinstance(message, Mark):
            return self._reply(message.payload)
        if isinstance(message, Final) and message.text:
            text = message.text if not self._texts else f" {message.text}"
            self._texts.append(message.text)
            self._language = self._opened.setup.config.language or message.language
            return [*self._start(), as_text(TranscriptChunk(text=text).event())]
        if isinstance(message, Error):
            return [as_text(WyomingError(text=message.message, code=message.code.value).event())]
        if isinstance(message, SessionEnded):
            whole = Transcript(text=" ".join(self._texts), language=self._language)
            return [*self._start(), as_text(whole.event()), as_text(TranscriptStop().event())]
        return []

    def _start(self) -> list[str]:
        if self._started:
            return []
        self._started = True
        return [as_text(TranscriptStart(language=self._language).event())]

    def _reply(self, payload: object) -> list[str]:
        if not isinstance(payload, Reply):
            return []
        if payload.kind == DESCRIBE:
            opened = self._opened
            return [as_text(info_event(opened.model, opened.model_languages))]
        return [as_text(pong(payload.data))]
