"""Parley's async Python client: connect, send audio, iterate typed results, finalize,
end. The CLI's ``parley stream`` is built on it.

    async with await LiveStream.connect("ws://127.0.0.1:8765/v1/stream",
                                        StreamConfig(diarization=True)) as live:
        sender = asyncio.create_task(send_all(live))   # live.send(pcm) …, live.end()
        async for message in live:                       # Partial, Final, SpeakerUpdate, …
            if isinstance(message, Final):
                print(message.speaker, message.text)
        print(live.transcript.finals)                    # speaker updates applied

Messages are the dataclasses of ``parley.protocol.messages``, the client's one
representation of what the server says (types and fields this version does not know
are left out, protocol.md section 8); ``transcript`` keeps the finals as the latest
``speaker_update`` left them. A fatal error ends the iteration with ``ServerError``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from urllib.parse import parse_qsl, urlencode, urlsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, ConnectionClosedError, InvalidHandshake

from parley.client.transcript import Transcript
from parley.protocol.messages import (
    ControlType,
    Error,
    ServerMessage,
    SessionEnded,
    SessionResumed,
    SessionStarted,
    StreamConfig,
    control_message,
    decode,
    known_speaker_message,
    parse,
)
from parley.protocol.paths import STREAM_PATH

# Audio kept to send again after a dropped connection: 64 s of 16 kHz PCM16, more than
# the server's default resume window of 30 s.
RESUME_BUFFER_BYTES = 2 * 1024 * 1024


class ServerError(Exception):
    """The server refused the stream or ended it with a fatal error: ``error`` says which."""

    def __init__(self, error: Error, close_code: int | None = None):
        super().__init__(f"{error.code.value}: {error.message}")
        self.error = error
        self.close_code = close_code


def stream_url(base: str, config: StreamConfig, token: str | None) -> str:
    """The stream URL for ``config``, with the key as ``token`` when given; a server's
    bare address (no path, or /, which is WhisperLive's wire) means its /v1/stream."""
    query = config.to_query()
    if token:
        query["token"] = token
    if urlsplit(base).path in ("", "/"):
        base = base.rstrip("/") + STREAM_PATH
    return f"{base.rstrip('/')}?{urlencode(query)}"


class Unreachable(ConnectionError):
    """No server answered at a Parley URL (refused, unknown host, or no answer); the
    CLI exits with 3 on it."""

    def __init__(self, url: str, cause: Exception):
        where = urlsplit(url)
        secure = where.scheme in ("wss", "https")
        self.server = f"{where.hostname}:{where.port or (443 if secure else 80)}"
        reason = getattr(cause, "strerror", None) or str(cause) or type(cause).__name__
        super().__init__(f"cannot reach {self.server}: is `parley serve` running? ({reason})")


class ResumeFailed(ConnectionError):
    """A dropped connection could not be resumed: the session is lost from here on."""


class LiveStream:
    """One session on a Parley server (``connect`` makes one).

    A session that the server lets resume (its ``session_started`` has a
    ``resume_token``) survives a dropped connection: the stream reconnects within the
    server's ``resume_window_s``, sends again the audio the server did not get (up to
    ``resume_buffer_bytes`` of the latest is kept), and skips messages it already had,
    so that no word is lost or repeated. ``resumes`` counts the reconnections."""

    def __init__(
        self,
        ws: ClientConnection,
        started: SessionStarted,
        url: str = "",
        resume_buffer_bytes: int = RESUME_BUFFER_BYTES,
    ):
        self._ws = ws
        self._url = url
        self.started = started
        self.transcript = Transcript()
        self.ended: SessionEnded | None = None  # once it came
        self.close_code: int | None = None
        self.resumes = 0
        self._token = started.resume_token
        self._window_s = float(started.limits.get("resume_window_s", 0.0))
        self._last_seq = 0
        self._unacked: deque[tuple[int, bytes]] = deque()  # (offset, audio) kept to resend
        self._kept_bytes = 0
        self._buffer_cap = resume_buffer_bytes
        self._offset = 0  # audio bytes handed to send() so far
        self._delivered = 0  # of those, the ones written to a connection (or resent)
        self._ending = False  # end() was called
        self._connected = asyncio.Event()
        self._connected.set()

    @classmethod
    async def connect(
        cls,
        url: str,
        config: StreamConfig | None = None,
        token: str | None = None,
        open_timeout: float = 30.0,
    ) -> LiveStream:
        """Open a session (``url`` is the /v1/stream endpoint); ServerError if refused."""
        return await cls.open(stream_url(url, config or StreamConfig(), token), open_timeout)

    @classmethod
    async def open(cls, full_url: str, open_timeout: float = 30.0) -> LiveStream:
        """Open a session at a URL that already holds its query string; the handshake
        may take ``open_timeout`` seconds (behind a proxy that queues sessions, longer)."""
        try:
            ws = await connect(full_url, max_size=None, compression=None, open_timeout=open_timeout)
        except OSError as exc:  # websockets' own errors (a refused handshake) are not OSError
            raise Unreachable(full_url, exc) from exc
        text = await ws.recv()
        try:
            first = parse(decode(text))
        except ValueError:  # another wire's message: the URL is not Parley's stream
            await ws.close()
            raise ConnectionError(
                f"{full_url} did not start a Parley session (a Parley server streams at "
                f"ws://HOST:PORT{STREAM_PATH}): {str(text)[:200]!r}"
            ) from None
        if isinstance(first, Error):
            await ws.wait_closed()
            raise ServerError(first, ws.close_code)
        if not isinstance(first, SessionStarted):
            await ws.close()
            raise ConnectionError(f"{full_url} did not start a session: {first!r}")
        return cls(ws, first, full_url)

    async def send(self, audio: bytes) -> None:
        """One audio message, in the config's encoding (waits while the server is busy,
        and while a dropped connection is being resumed)."""
        start = self._offset
        self._offset += len(audio)
        if self._token is not None:
            self._unacked.append((start, audio))
            self._kept_bytes += len(audio)
            while self._kept_bytes - len(self._unacked[0][1]) >= self._buffer_cap:
                self._kept_bytes -= len(self._unacked.popleft()[1])
        await self._connected.wait()
        if start + len(audio) <= self._delivered:
            return  # a resume sent it again already
        try:
            await self._ws.send(audio)
        except ConnectionClosed:
            if self._token is None:
                raise
            return  # kept: the resume sends what the server did not get
        self._delivered = start + len(audio)

    async def known_speaker(self, name: str, clip: bytes) -> None:
        """A voice you know (a diarized stream's): ``clip``, the bytes of a 2 to 10 s
        recording of it in any format ffmpeg reads. The label whose voice matches it is
        named in ``transcript.names`` (a clip refused comes back as a ``bad_message``)."""
        await self._ws.send(known_speaker_message(name, clip))

    async def finalize(self) -> None:
        """Close the open segment now: its final, then ``finalized``."""
        await self._ws.send(control_message(ControlType.FINALIZE))

    async def end(self) -> None:
        """No more audio: the remaining finals, then ``session_ended``, end the iteration."""
        self._ending = True
        await self._connected.wait()
        try:
            await self._ws.send(control_message(ControlType.END_OF_STREAM))
        except ConnectionClosed:
            if self._token is None:
                raise  # else the resume says it again

    async def close(self) -> None:
        await self._ws.close()
        self.close_code = self._ws.close_code

    async def __aiter__(self) -> AsyncIterator[ServerMessage]:
        """The server's messages, up to ``session_ended`` (resuming the session when its
        connection drops, if the server allows)."""
        while True:
            try:
                async for message in self._messages():
                    yield message
                return
            except ConnectionClosedError:
                if self._token is None or self.ended is not None:
                    raise
                await self._resume()

    async def _messages(self) -> AsyncIterator[ServerMessage]:
        async for text in self._ws:
            data = decode(text)
            seq = data.get("seq")
            if seq is not None:
                if seq <= self._last_seq:
                    continue  # had it before the connection dropped
                self._last_seq = seq
            message = parse(data)
            if message is None or isinstance(message, SessionResumed):
                continue
            self.transcript.apply(message)
            yield message
            if isinstance(message, SessionEnded):
                self.ended = message
                await self._ws.wait_closed()  # the server closes with 1000 right after
                break
            if isinstance(message, Error) and message.fatal:
                await self._ws.wait_closed()
                self.close_code = self._ws.close_code
                raise ServerError(message, self.close_code)
        self.close_code = self._ws.close_code

    async def _resume(self) -> None:
        """Reconnect with the token within the window, then send again the audio (and
        the end) the server did not get; ResumeFailed if that cannot be done."""
        self._connected.clear()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._window_s
        query = {"resume": self._token, "last_seq": str(self._last_seq)}
        token = dict(parse_qsl(urlsplit(self._url).query)).get("token")
        if token:
            query["token"] = token
        url = f"{self._url.split('?')[0]}?{urlencode(query)}"
        wait = 0.05
        while True:
            try:
                ws = await connect(url, max_size=None, compression=None, open_timeout=10)
                first = parse(decode(await ws.recv()))
                break
            except (TimeoutError, OSError, ConnectionClosed, InvalidHandshake) as exc:
                if loop.time() + wait > deadline:
                    raise ResumeFailed(
                        f"could not resume the session within {self._window_s:g} s: {exc}"
                    ) from exc
                await asyncio.sleep(wait)
                wait = min(2 * wait, 1.0)
        if not isinstance(first, SessionResumed):
            await ws.close()
            why = first.message if isinstance(first, Error) else repr(first)
            raise ResumeFailed(f"the server refused the resume: {why}")
        self._ws = ws
        received = first.audio_received_bytes
        if self._unacked and received < self._unacked[0][0] or received > self._offset:
            raise ResumeFailed(
                f"the server has {received} bytes of audio; this stream kept "
                f"only those after {self._unacked[0][0] if self._unacked else 0}"
            )
        for start, audio in self._unacked:
            if start + len(audio) > received:
                await ws.send(audio[max(0, received - start) :])
        self._delivered = self._offset
        if self._ending:
            await ws.send(control_message(ControlType.END_OF_STREAM))
        self.resumes += 1
        self._connected.set()

    async def __aenter__(self) -> LiveStream:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


async def send_paced(
    live: LiveStream,
    chunks: AsyncIterator[bytes],
    bytes_per_second: int,
    fast: bool = False,
    stop: asyncio.Event | None = None,
) -> None:
    """Send ``chunks`` in real time (chunk n leaves at n × its length, by the clock, not
    by sleeps that drift), or as fast as the server reads with ``fast``; then end. Once
    ``stop`` is set no more is read, as if the chunks had ended there."""
    loop = asyncio.get_running_loop()
    started, sent = loop.time(), 0
    while (chunk := await _next_unless(chunks, stop)) is not None:
        if not fast:
            delay = started + sent / bytes_per_second - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
        await live.send(chunk)
        sent += len(chunk)
    await live.end()


async def _next_unless(chunks: AsyncIterator[bytes], stop: asyncio.Event | None) -> bytes | None:
    """The next chunk; None at the end, or once ``stop`` is set (even while waiting for
    a source that has nothing yet: a live one)."""
    if stop is None:
        return await anext(chunks, None)
    if stop.is_set():
        return None
    coming = asyncio.ensure_future(anext(chunks, None))
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({coming, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if coming.done():
        return coming.result()
    coming.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await coming
    return None
