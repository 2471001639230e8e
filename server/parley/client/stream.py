"""Stream audio to a Parley server and collect what it says (the CLI's `parley stream`).

Audio files, and live sources by URL (an HLS playlist, RTSP, RTMP, SRT, HTTP: what
ffmpeg reads, as WhisperLive's client takes them), are decoded by ffmpeg into 16 kHz
mono PCM16; ``-`` reads raw PCM16 from standard input. Audio goes out in 100 ms
messages, at real-time pace unless ``fast`` (then as fast as the server reads: its
back-pressure sets the pace). Ctrl-C ends the audio where it is, as if the source had
ended there: the last finals still come.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shutil
import signal
import sys
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO
from urllib.parse import urlsplit

from parley.client.live import LiveStream, ServerError, send_paced, stream_url
from parley.client.transcript import with_names
from parley.core.audio import ffmpeg_pcm16_command
from parley.protocol.messages import (
    Error,
    Final,
    Partial,
    ServerMessage,
    SessionEnded,
    SessionStarted,
    SpeakerNames,
)

__all__ = [
    "StreamResult",
    "run_stream",
    "stream_until_stopped",
    "is_url",
    "ffmpeg_pcm",
    "stdin_pcm",
    "stream_url",
    "LiveDisplay",
    "token_from_env",
    "ServerError",
]

CHUNK_SECONDS = 0.1
# Where ffmpeg reads a stream from the network rather than a file.
URL_SCHEMES = frozenset(
    {"http", "https", "rtsp", "rtsps", "rtmp", "rtmps", "srt", "udp", "rtp", "tcp"}
)


def is_url(source: str) -> bool:
    """Whether ``source`` names a network stream (a URL ffmpeg opens), not a file."""
    return urlsplit(source).scheme.lower() in URL_SCHEMES


# Called with each message as it comes (the CLI's live display).
OnMessage = Callable[[ServerMessage], None] | None


@dataclass
class StreamResult:
    """What one streamed session gave: its messages by kind, and how it closed."""

    started: SessionStarted | None = None
    partials: list[Partial] = field(default_factory=list)
    finals: list[Final] = field(default_factory=list)
    errors: list[Error] = field(default_factory=list)
    ended: SessionEnded | None = None
    close_code: int | None = None


class UndecodableAudio(RuntimeError):
    """ffmpeg could not read the file: its own message."""


async def ffmpeg_pcm(path: str, sample_rate: int = 16000) -> AsyncIterator[bytes]:
    """Any file (or URL) ffmpeg can read → mono PCM16 at ``sample_rate``, in 100 ms
    chunks."""
    if shutil.which("ffmpeg") is None:
        raise RuntimeError("ffmpeg is needed to decode audio files (apt-get install ffmpeg)")
    process = await asyncio.create_subprocess_exec(
        *ffmpeg_pcm16_command(path, sample_rate),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    chunk = int(sample_rate * CHUNK_SECONDS) * 2
    try:
        while data := await _read_up_to(process.stdout, chunk):
            yield data
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        # Read what is left to the end: before Python 3.12, wait() never returns while a
        # pipe whose reader paused (its buffer full) is still open.
        await process.stdout.read()
        stderr = (await process.stderr.read()).decode(errors="replace").strip()
        code = await process.wait()
    if code not in (0, -9) and stderr:
        raise UndecodableAudio(f"ffmpeg could not decode {path}: {stderr}")


async def _read_up_to(stream: asyncio.StreamReader, size: int) -> bytes:
    try:
        return await stream.readexactly(size)
    except asyncio.IncompleteReadError as short:
        return short.partial


async def stdin_pcm(bytes_per_chunk: int) -> AsyncIterator[bytes]:
    """Standard input in chunks of ``bytes_per_chunk``, until it ends. Read on a thread
    of its own that the process does not wait for: a read that blocks (a pipe that stays
    open) must not keep a Ctrl-C'd client from exiting."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes] = asyncio.Queue(8)

    def pump() -> None:
        while True:
            data = sys.stdin.buffer.read(bytes_per_chunk)
            try:
                asyncio.run_coroutine_threadsafe(queue.put(data), loop).result()
            except (RuntimeError, concurrent.futures.CancelledError):  # the loop is gone
                return
            if not data:
                return

    threading.Thread(target=pump, name="stdin", daemon=True).start()
    while data := await queue.get():
        yield data


def stream_until_stopped(
    url: str,
    chunks: AsyncIterator[bytes],
    bytes_per_second: int,
    fast: bool = False,
    on_message: OnMessage = None,
    on_stop: Callable[[], None] | None = None,
    known_speakers: Sequence[tuple[str, bytes]] = (),
) -> StreamResult:
    """``run_stream`` in its own event loop, where a first SIGINT (Ctrl-C) ends the audio
    there (``on_stop`` is told) and the session ends as after the source's end, its
    last finals received; a second raises KeyboardInterrupt at once."""

    async def run() -> StreamResult:
        stop = asyncio.Event()
        task = asyncio.current_task()
        assert task is not None

        def interrupted() -> None:
            if stop.is_set():
                task.cancel()
                return
            stop.set()
            if on_stop is not None:
                on_stop()

        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, interrupted)
        try:
            return await run_stream(
                url,
                chunks,
                bytes_per_second,
                fast=fast,
                on_message=on_message,
                stop=stop,
                known_speakers=known_speakers,
            )
        except asyncio.CancelledError:
            raise KeyboardInterrupt from None
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    return asyncio.run(run())


async def run_stream(
    url: str,
    chunks: AsyncIterator[bytes],
    bytes_per_second: int,
    *,
    fast: bool = False,
    on_message: OnMessage = None,
    stop: asyncio.Event | None = None,
    known_speakers: Sequence[tuple[str, bytes]] = (),
) -> StreamResult:
    """Send ``chunks`` to ``url`` (a full stream URL, query included), then end_of_stream
    (at their end, or once ``stop`` is set); return everything the server said (a
    refusal or fatal error is in ``errors``). ``known_speakers``: (name, clip bytes) of
    voices to name, sent before the audio (``LiveStream.known_speaker``)."""
    result = StreamResult()
    try:
        live = await LiveStream.open(url)
    except ServerError as refused:
        _collect(result, refused.error, on_message)
        result.close_code = refused.close_code
        return result
    _collect(result, live.started, on_message)
    for name, clip in known_speakers:
        await live.known_speaker(name, clip)
    sender = asyncio.create_task(send_paced(live, chunks, bytes_per_second, fast, stop))
    receiver = asyncio.create_task(_receive(live, result, on_message))
    try:
        await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_EXCEPTION)
        if sender.done() and not sender.cancelled() and (error := sender.exception()) is not None:
            raise error  # the audio source failed: say so now, not at a timeout
        await receiver
    finally:
        for task in (sender, receiver):
            if not task.done():
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        close = getattr(chunks, "aclose", None)
        if close is not None:  # the session ended before the audio did: stop its source now,
            with contextlib.suppress(Exception):  # not at the event loop's close
                await close()
        await live.close()
    result.close_code = live.close_code
    return result


async def _receive(live: LiveStream, result: StreamResult, on_message: OnMessage) -> None:
    try:
        async for message in live:
            _collect(result, message, on_message)
    except ServerError:
        pass  # collected: the caller reads result.errors


def _collect(result: StreamResult, message: ServerMessage, on_message: OnMessage) -> None:
    if isinstance(message, SessionStarted):
        result.started = message
    elif isinstance(message, Partial):
        result.partials.append(message)
    elif isinstance(message, Final):
        result.finals.append(message)
    elif isinstance(message, Error):
        result.errors.append(message)
    elif isinstance(message, SessionEnded):
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
        self._names: dict[str, str] = {}  # label → known speaker, as speaker_names said

    def __call__(self, message: ServerMessage) -> None:
        from parley.client.formats import text_lines

        if isinstance(message, Partial) and self._show_partials:
            line = f"… {message.text}"[-(self._width - 1) :]
            self._out.write("\r\x1b[K" + line)
        elif isinstance(message, Final) and message.text.strip():
            lines = "".join(line + "\n" for line in text_lines(with_names(message, self._names)))
            self._out.write(("\r\x1b[K" if self._tty else "") + lines)
        elif isinstance(message, SpeakerNames):
            self._names = message.names
            told = ", ".join(f"{label} is {name}" for label, name in sorted(message.names.items()))
            self._out.write(("\r\x1b[K" if self._tty else "") + f"({told or 'no names'})\n")
        elif isinstance(message, Error):
            self._out.write(
                ("\r\x1b[K" if self._tty else "")
                + f"error {message.code.value}: {message.message}\n"
            )
        self._out.flush()


def token_from_env() -> str | None:
    """The API key in ``PARLEY_TOKEN``, if set."""
    return os.environ.get("PARLEY_TOKEN") or None
