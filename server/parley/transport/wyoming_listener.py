"""The Wyoming TCP listener (protocol.md section 10c): each connection's events up to
its audio read here (``describe`` and ``ping`` answered, ``transcribe`` kept), then the
connection handed to the streaming endpoint as a session of the Wyoming dialect, whose
settings the events before the audio gave. Admission, limits, drain, metrics and logs
are the endpoint's, as on every WebSocket wire.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlencode

from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request
from wyoming.asr import Transcript
from wyoming.error import Error as WyomingError
from wyoming.event import Event

from parley.core.keyterms import MAX_KEYTERM_CHARS, MAX_KEYTERMS
from parley.protocol.messages import Encoding, Error, ErrorCode
from parley.protocol.paths import WYOMING_PATH
from parley.runtime.metrics import Metrics
from parley.transport.admission import Refused
from parley.transport.ws_server import StreamEndpoint
from parley.transport.wyoming import DESCRIBE, PING, pong
from parley.transport.wyoming_wire import (
    AUDIO_CHUNK,
    MAX_HEADER_BYTES,
    AudioFormat,
    WyomingConnection,
    as_text,
)

log = logging.getLogger(__name__)

# Events a connection may send before its audio (describe, ping, transcribe, others
# dropped): past them it is refused, as is one quiet for the idle timeout.
MAX_EVENTS_BEFORE_AUDIO = 64
SAMPLE_WIDTH = Encoding.PCM_S16LE.sample_width  # Parley reads Wyoming's 16-bit PCM


@dataclass(frozen=True)
class WyomingLimits:
    """What bounds a Wyoming connection (from the server's settings)."""

    max_payload: int  # bytes of one audio chunk (max_frame_bytes)
    idle_timeout_s: float
    waiting: int  # connections reading their events before audio (max_sessions)
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()  # () : any


def networks_of(allowed: Sequence[str] | None) -> tuple:
    return tuple(ipaddress.ip_network(n, strict=False) for n in allowed or ())


def session_query(transcribe: dict, audio: AudioFormat) -> str:
    """The session's settings, as /v1/stream's query names them, from ``transcribe``
    (language, the names and terms to listen for) and the audio's format."""
    rate, _, channels = audio
    query = {
        "encoding": Encoding.PCM_S16LE.value,
        "sample_rate": str(rate),
        "channels": str(channels),
        "partials": "false",  # transcript chunks are finals
    }
    language = transcribe.get("language")
    if isinstance(language, str) and language.strip():
        query["language"] = language.strip().replace("_", "-").split("-")[0].lower()
    terms = [
        part.strip()
        for field in ("transcript_names", "transcript_terms")  # names first, as Wyoming ranks them
        for term in _strings(transcribe.get(field))
        for part in term.split(",")  # keyterms are listed with commas
        if part.strip() and len(part.strip()) <= MAX_KEYTERM_CHARS
    ]
    if terms:
        query["keyterms"] = ",".join(list(dict.fromkeys(terms))[:MAX_KEYTERMS])
    return urlencode(query)


def _strings(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def audio_format(data: dict) -> AudioFormat:
    """An audio event's format; Refused(Error(bad_config)) for one Parley does not read."""
    rate, width, channels = (data.get(name) for name in ("rate", "width", "channels"))
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (rate, width, channels)):
        raise Refused(
            Error(ErrorCode.BAD_MESSAGE, "rate, width and channels must be whole numbers")
        )
    if width != SAMPLE_WIDTH:
        raise Refused(
            Error(ErrorCode.BAD_CONFIG, f"audio must be 16-bit PCM (width 2), not {width}")
        )
    return rate, width, channels  # type: ignore[return-value]


class WyomingListener:
    """Serves the Wyoming port; holds no per-connection state beyond counts."""

    def __init__(
        self, endpoint: StreamEndpoint, info: Event, limits: WyomingLimits, metrics: Metrics
    ):
        self._endpoint = endpoint
        self._info = info
        self._limits = limits
        self._metrics = metrics
        self._server: asyncio.Server | None = None
        self._waiting = 0  # connections reading their events before audio (the limit's)
        self._greeting = 0  # connections before their session: reading, or being refused
        self._greeted = asyncio.Event()  # set while none is
        self._greeted.set()
        self._closing = asyncio.Event()

    async def listen(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self.handle, host, port, limit=MAX_HEADER_BYTES)

    @property
    def port(self) -> int:
        """The port it listens on (the one chosen, for port 0)."""
        if self._server is None:
            raise RuntimeError("the Wyoming listener is not listening")
        return self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening. A connection still before its audio is told the server is
        shutting down (``shutting_down``) and closed, not left to its idle timeout; the
        sessions already opened are the endpoint's to end."""
        if self._server is not None:
            self._server.close()
        self._closing.set()
        await self._greeted.wait()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = WyomingConnection(reader, writer, self._limits.max_payload)
        opening = None
        self._greeting += 1
        self._greeted.clear()
        try:
            opening = await self._opening(connection, writer.get_extra_info("peername"))
        finally:
            if opening is None:
                await connection.close()
            self._greeting -= 1
            if not self._greeting:
                self._greeted.set()
        if opening is None:
            return
        try:
            connection.request = Request(f"{WYOMING_PATH}?{opening[0]}", Headers())
            connection.audio_format = opening[1]
            await self._endpoint.handle(connection)
        finally:
            await connection.close()

    async def _opening(
        self, connection: WyomingConnection, peer: object
    ) -> tuple[str, AudioFormat] | None:
        """The session's query and audio format; None when there is no session to open:
        the client left, or was refused and told why."""
        try:
            refusal = self._refusal(peer)
            if refusal is not None:
                raise refusal
            self._waiting += 1
            try:
                return await self._until_audio(connection)
            finally:
                self._waiting -= 1
        except Refused as broken:
            self._metrics.errors.labels(broken.error.code.value).inc()
            log.info("refused a Wyoming connection: %s", broken.error.message)
            error = WyomingError(text=broken.error.message, code=broken.error.code.value)
            await self._send(connection, error.event())
            return None

    def _refusal(self, peer: object) -> Refused | None:
        networks = self._limits.networks
        if networks and not _within(peer, networks):
            return Refused(
                Error(ErrorCode.UNAUTHORIZED, "this address is not in wyoming.allowed_networks")
            )
        if self._waiting >= self._limits.waiting:
            return Refused(Error(ErrorCode.SERVER_BUSY, "too many connections; try again later"))
        return None

    async def _until_audio(self, connection: WyomingConnection) -> tuple[str, AudioFormat] | None:
        """The session's query and audio format, from the events up to the first audio;
        None if the client left (or stopped with no audio, answered with an empty
        transcript)."""
        transcribe: dict = {}
        for _ in range(MAX_EVENTS_BEFORE_AUDIO):
            event = await self._next_event(connection)
            if event is None:
                return None
            if event.type == DESCRIBE:
                await self._send(connection, self._info)
            elif event.type == PING:
                await self._send(connection, pong(event.data))
            elif event.type == "transcribe":
                transcribe = event.data
            elif event.type in ("audio-start", AUDIO_CHUNK):
                audio = audio_format(event.data)
                if event.type == AUDIO_CHUNK:
                    connection.put_back(event)
                return session_query(transcribe, audio), audio
            elif event.type == "audio-stop":
                await self._send(connection, Transcript(text="").event())
                return None
        raise Refused(
            Error(ErrorCode.BAD_MESSAGE, f"no audio in the first {MAX_EVENTS_BEFORE_AUDIO} events")
        )

    async def _next_event(self, connection: WyomingConnection) -> Event | None:
        """The client's next event; Refused when it sends none for the idle timeout, or
        the server begins to shut down first."""
        reading = asyncio.ensure_future(connection.next_event())
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            await asyncio.wait(
                (reading, closing),
                timeout=self._limits.idle_timeout_s,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            closing.cancel()
            if not reading.done():
                reading.cancel()  # a queue's get: nothing read is lost
        if reading.done() and not reading.cancelled():
            return reading.result()
        if self._closing.is_set():
            raise Refused(Error(ErrorCode.SHUTTING_DOWN, "the server is shutting down"))
        raise Refused(
            Error(ErrorCode.IDLE_TIMEOUT, f"no event for {self._limits.idle_timeout_s:g} s")
        )

    @staticmethod
    async def _send(connection: WyomingConnection, event: Event) -> None:
        try:
            await connection.send(as_text(event))
        except ConnectionClosed:  # the client has gone: nobody is left to tell
            log.debug("a Wyoming client left before an answer", exc_info=True)


def _within(peer: object, networks: Sequence) -> bool:
    if not isinstance(peer, tuple) or not peer:
        return False
    try:
        address = ipaddress.ip_address(peer[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in networks)
