"""Wyoming's framing, read within bounds, and one Wyoming TCP connection in the shape
of the streaming endpoint's ``Connection`` (protocol.md section 10c).

An event is a JSON header line, then optionally ``data_length`` bytes of more JSON
data, then optionally ``payload_length`` bytes of payload (PCM audio). The wyoming
package's own reader trusts the lengths a header declares, so a client could make the
server allocate whatever it names: events are read here, each part bounded, and written
by the package (``async_write_event``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json

from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request
from wyoming.event import Event, async_write_event

from parley.protocol.messages import Error, ErrorCode
from parley.transport.admission import Refused

MAX_HEADER_BYTES = 64 * 1024  # a header line, and a header's extra data
# Events read ahead of the session; past them the socket is not read, and TCP's own flow
# control holds the client back.
EVENTS_AHEAD = 16
AUDIO_CHUNK = "audio-chunk"

AudioFormat = tuple[int, int, int]  # rate (Hz), width (bytes), channels


def as_text(event: Event) -> str:
    """An event without payload as the endpoint's text message (its type and data)."""
    return json.dumps(event.to_dict())


def _json_object(raw: bytes, what: str) -> dict:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the stack
        value = None
    if not isinstance(value, dict):
        raise Refused(Error(ErrorCode.BAD_MESSAGE, f"{what} is not a JSON object"))
    return value


def _length(header: dict, name: str, most: int) -> int:
    size = header.get(name) or 0
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise Refused(Error(ErrorCode.BAD_MESSAGE, f"{name} must be a whole number of bytes"))
    if size > most:
        raise Refused(Error(ErrorCode.FRAME_TOO_LARGE, f"{name} of {size} bytes exceeds {most}"))
    return size


async def read_event(reader: asyncio.StreamReader, max_payload: int) -> Event | None:
    """The client's next event, or None once it has gone (the end of its stream, within an
    event too); Refused for what is no Wyoming event or exceeds the bounds. The reader
    must be made with ``limit=MAX_HEADER_BYTES``, which bounds the header line."""
    try:
        line = await reader.readuntil(b"\n")
        header = _json_object(line, "an event's header line")
        kind = header.get("type")
        if not isinstance(kind, str):
            raise Refused(Error(ErrorCode.BAD_MESSAGE, 'an event\'s header needs a string "type"'))
        data = header.get("data") or {}
        if not isinstance(data, dict):
            raise Refused(Error(ErrorCode.BAD_MESSAGE, "an event's data is not a JSON object"))
        extra = _length(header, "data_length", MAX_HEADER_BYTES)
        if extra:
            data = {**data, **_json_object(await reader.readexactly(extra), "an event's data")}
        size = _length(header, "payload_length", max_payload)
        payload = await reader.readexactly(size) if size else None
    except asyncio.IncompleteReadError:
        return None
    except asyncio.LimitOverrunError:
        raise Refused(
            Error(
                ErrorCode.FRAME_TOO_LARGE,
                f"an event's header line exceeds {MAX_HEADER_BYTES} bytes",
            )
        ) from None
    return Event(kind, data, payload)


class WyomingConnection:
    """One client's TCP connection, read ahead into a bounded queue (so that a cancelled
    ``recv`` loses nothing, as websockets' does not). Before its session opens, the
    listener reads its events; once open (``request`` and ``audio_format`` set), each
    event is a message: an audio chunk in the stream's format its bare PCM, any other
    event its JSON text. Each text message out is an event."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_payload: int
    ):
        self._writer = writer
        self._events: asyncio.Queue[Event | Refused | None] = asyncio.Queue(EVENTS_AHEAD)
        self._back: list[Event] = []
        self._reading = asyncio.ensure_future(self._read(reader, max_payload))
        self._closed = False
        self.request: Request | None = None  # the session's settings, once it opens
        self.audio_format: AudioFormat | None = None  # the stream's, once it opens

    async def _read(self, reader: asyncio.StreamReader, max_payload: int) -> None:
        try:
            while (event := await read_event(reader, max_payload)) is not None:
                await self._events.put(event)
            await self._events.put(None)
        except Refused as broken:
            await self._events.put(broken)
        except (ConnectionError, OSError):
            await self._events.put(None)

    async def next_event(self) -> Event | None:
        """The client's next event (None: it has gone); Refused when what it sent is no
        event: nothing after it can be read."""
        if self._back:
            return self._back.pop()
        event = await self._events.get()
        if event is None or isinstance(event, Refused):
            self._events.put_nowait(event)  # it stays the last thing read
        if isinstance(event, Refused):
            raise event
        return event

    def put_back(self, event: Event) -> None:
        """Read ``event`` again next (the audio chunk that opened the session)."""
        self._back.append(event)

    async def recv(self) -> str | bytes:
        event = await self.next_event()  # Refused: the endpoint ends the session with its error
        if event is None:
            raise ConnectionClosed(None, None)
        if event.type == AUDIO_CHUNK and self._in_format(event.data):
            return event.payload or b""
        return as_text(event)

    def _in_format(self, data: dict) -> bool:
        return (data.get("rate"), data.get("width"), data.get("channels")) == self.audio_format

    async def send(self, message: str | bytes) -> None:
        if self._closed or self._writer.is_closing():
            raise ConnectionClosed(None, None)
        event = Event.from_dict(json.loads(message))
        try:
            await async_write_event(event, self._writer)
        except (ConnectionError, OSError):
            raise ConnectionClosed(None, None) from None

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Close the socket (Wyoming has no close codes: an ``error`` event said why)."""
        if self._closed:
            return
        self._closed = True
        self._reading.cancel()
        await asyncio.gather(self._reading, return_exceptions=True)
        self._writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()
