"""Stream audio to a Parley server and collect what it says (the CLI's `parley stream`).

Audio files are decoded by ffmpeg into 16 kHz mono PCM16; ``-`` reads raw PCM16
from standard input. Audio goes out in 100 ms messages, at real-time pace unless
``fast`` (then as fast as the server reads: its back-pressure sets the pace).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, TextIO
from urllib.parse import urlencode

from websockets.asyncio.client import connect

from parley.protocol.messages import ControlType, StreamConfig, control_message, decode

CHUNK_SECONDS = 0.1


class ServerError(Exception):
    def __init__(self, message: dict):
        super().__init__(f"{message.get('code')}: {message.get('message')}")
        self.message = message


@dataclass
class StreamResult:
    started: dict | None = None
    partials: list[dict] = field(default_factory=list)
    finals: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    ended: dict | None = None
    close_code: int | None = None


def stream_url(base: str, config: StreamConfig, token: str | None) -> str:
    query = config.to_query()
    if token:
        query["token"] = token
    return f"{base.rstrip('/')}?{urlencode(query)}"


async def ffmpeg_pcm(path: str, sample_rate: int = 16000) -> AsyncIterator[bytes]:
    """Any file ffmpeg can read → mono PCM16 at ``sample_rate``, in 100 ms chunks."""
    if shutil.which("ffmpeg") is None:
        raise RuntimeError("ffmpeg is needed to decode audio files (apt-get install ffmpeg)")
    process = await asyncio.create_subprocess_exec(
        "ffmpeg", "-nostdin", "-loglevel", "error", "-i", path, "-f", "s16le",
        "-acodec", "pcm_s16le", "-ac", "1", "-ar", str(sample_rate), "-",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    chunk = int(sample_rate * CHUNK_SECONDS) * 2
    try:
        while data := await _read_up_to(process.stdout, chunk):
            yield data
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        stderr = (await process.stderr.read()).decode(errors="replace").strip()
        code = await process.wait()
    if code not in (0, -9) and stderr:
        raise RuntimeError(f"ffmpeg could not decode {path}: {stderr}")


async def _read_up_to(stream: asyncio.StreamReader, size: int) -> bytes:
    try:
        return await stream.readexactly(size)
    except asyncio.IncompleteReadError as short:
        return short.partial


async def stdin_pcm(bytes_per_chunk: int) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    reader = sys.stdin.buffer
    while data := await loop.run_in_executor(None, reader.read, bytes_per_chunk):
        yield data


async def run_stream(url: str, chunks: AsyncIterator[bytes], bytes_per_second: int, *,
                     fast: bool = False, on_message: Callable[[dict], None] | None = None
                     ) -> StreamResult:
    """Send ``chunks`` to ``url``, then end_of_stream; return everything the server said."""
    result = StreamResult()
    async with connect(url, max_size=None, compression=None, open_timeout=30) as ws:
        first = decode(await ws.recv())
        _collect(result, first, on_message)
        if first["type"] == "error":
            await ws.wait_closed()
            result.close_code = ws.close_code
            return result

        async def send_audio() -> None:
            loop = asyncio.get_running_loop()
            started = loop.time()
            sent = 0
            async for chunk in chunks:
                if not fast:
                    # Pace by the clock, not by sleeps that drift: chunk n leaves at n × its length.
                    delay = started + sent / bytes_per_second - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                await ws.send(chunk)
                sent += len(chunk)
            await ws.send(control_message(ControlType.END_OF_STREAM))

        sender = asyncio.create_task(send_audio())
        try:
            async for raw in ws:
                message = decode(raw)
                _collect(result, message, on_message)
                if message["type"] == "session_ended":
                    break
        finally:
            if not sender.done():
                sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender
        if result.ended:
            await ws.wait_closed()  # the server closes with 1000 right after session_ended
        result.close_code = ws.close_code
    return result


def _collect(result: StreamResult, message: dict, on_message) -> None:
    kind = message["type"]
    if kind == "session_started":
        result.started = message
    elif kind == "partial":
        result.partials.append(message)
    elif kind == "final":
        result.finals.append(message)
    elif kind == "error":
        result.errors.append(message)
    elif kind == "session_ended":
        result.ended = message
    if on_message is not None:
        on_message(message)


class LiveDisplay:
    """Partials rewrite one line of a terminal; finals are printed as they come."""

    def __init__(self, out: TextIO, show_partials: bool):
        self._out = out
        self._tty = out.isatty()
        self._show_partials = show_partials and self._tty
        self._width = shutil.get_terminal_size((100, 20)).columns if self._tty else 0

    def __call__(self, message: dict) -> None:
        from parley.client.formats import text_line

        kind = message["type"]
        if kind == "partial" and self._show_partials:
            line = f"… {message['text']}"[-(self._width - 1):]
            self._out.write("\r\x1b[K" + line)
        elif kind == "final" and message["text"].strip():
            self._out.write(("\r\x1b[K" if self._tty else "") + text_line(message) + "\n")
        elif kind == "error":
            self._out.write(("\r\x1b[K" if self._tty else "")
                            + f"error {message['code']}: {message['message']}\n")
        self._out.flush()


def token_from_env() -> str | None:
    return os.environ.get("PARLEY_TOKEN") or None
