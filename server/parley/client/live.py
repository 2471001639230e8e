"""Parley's async Python client: connect, send audio, iterate typed results, finalize,
end. The CLI's ``parley stream`` is built on it.

    async with await LiveStream.connect("ws://127.0.0.1:8765/v1/stream",
                                        StreamConfig(diarization=True)) as live:
        sender = asyncio.create_task(send_all(live))   # live.send(pcm) …, live.end()
        async for message in live:                       # Partial, Final, SpeakerUpdate, …
            if isinstance(message, Final):
                print(message.speaker, message.text)
        print(live.transcript.finals)                    # speaker updates applied

Messages are the dataclasses of ``parley.protocol.messages``; ``transcript`` keeps the
finals as the latest ``speaker_update`` left them. A fatal error ends the iteration
with ``ServerError``.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator
from urllib.parse import urlencode

from websockets.asyncio.client import ClientConnection, connect

from parley.client.transcript import Transcript
from parley.protocol.messages import (ControlType, ServerMessage, SessionStarted, StreamConfig,
                                      control_message, decode, parse)


class ServerError(Exception):
    """The server refused the stream or ended it with a fatal error."""

    def __init__(self, message: dict, close_code: int | None = None):
        super().__init__(f"{message.get('code')}: {message.get('message')}")
        self.message = message
        self.close_code = close_code


def stream_url(base: str, config: StreamConfig, token: str | None) -> str:
    query = config.to_query()
    if token:
        query["token"] = token
    return f"{base.rstrip('/')}?{urlencode(query)}"


class LiveStream:
    """One session on a Parley server (``connect`` makes one)."""

    def __init__(self, ws: ClientConnection, started: dict):
        self._ws = ws
        self.started = started                  # the session_started message
        self.transcript = Transcript()
        self.ended: dict | None = None          # session_ended, once it came
        self.close_code: int | None = None
        parsed = parse(started)
        assert isinstance(parsed, SessionStarted)
        self.session: SessionStarted = parsed

    @classmethod
    async def connect(cls, url: str, config: StreamConfig = StreamConfig(),
                      token: str | None = None) -> "LiveStream":
        """Open a session (``url`` is the /v1/stream endpoint); ServerError if refused."""
        return await cls.open(stream_url(url, config, token))

    @classmethod
    async def open(cls, full_url: str) -> "LiveStream":
        """Open a session at a URL that already holds its query string."""
        ws = await connect(full_url, max_size=None, compression=None, open_timeout=30)
        first = decode(await ws.recv())
        if first["type"] == "error":
            await ws.wait_closed()
            raise ServerError(first, ws.close_code)
        return cls(ws, first)

    async def send(self, audio: bytes) -> None:
        """One audio message, in the config's encoding (waits while the server is busy)."""
        await self._ws.send(audio)

    async def finalize(self) -> None:
        """Close the open segment now: its final, then ``finalized``."""
        await self._ws.send(control_message(ControlType.FINALIZE))

    async def end(self) -> None:
        """No more audio: the remaining finals, then ``session_ended``, end the iteration."""
        await self._ws.send(control_message(ControlType.END_OF_STREAM))

    async def close(self) -> None:
        await self._ws.close()
        self.close_code = self._ws.close_code

    async def raw(self) -> AsyncIterator[dict]:
        """The server's messages as JSON objects, up to ``session_ended``."""
        async for text in self._ws:
            message = decode(text)
            self.transcript.apply(message)
            yield message
            if message["type"] == "session_ended":
                self.ended = message
                await self._ws.wait_closed()  # the server closes with 1000 right after
                break
            if message["type"] == "error" and message.get("fatal"):
                await self._ws.wait_closed()
                self.close_code = self._ws.close_code
                raise ServerError(message, self.close_code)
        self.close_code = self._ws.close_code

    async def __aiter__(self) -> AsyncIterator[ServerMessage]:
        async for data in self.raw():
            message = parse(data)
            if message is not None:
                yield message

    async def __aenter__(self) -> "LiveStream":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


async def send_paced(live: LiveStream, chunks: AsyncIterator[bytes], bytes_per_second: int,
                     fast: bool = False) -> None:
    """Send ``chunks`` in real time (chunk n leaves at n × its length, by the clock, not
    by sleeps that drift), or as fast as the server reads with ``fast``; then end."""
    loop = asyncio.get_running_loop()
    started, sent = loop.time(), 0
    async for chunk in chunks:
        if not fast:
            delay = started + sent / bytes_per_second - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
        await live.send(chunk)
        sent += len(chunk)
    await live.end()


