"""Any recording ffmpeg reads, decoded to 16 kHz float32 (mono, or each channel apart),
within a duration limit.

ffmpeg runs as a child process that reads the upload's temporary file and writes raw
samples to a pipe; nothing is kept past ``max_s``, so a long upload costs at most the
limit's worth of memory (20 minutes: 77 MB of float32).
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np

from parley.core.audio import SAMPLE_RATE, ffmpeg_pcm16_command
from parley.core.speaker_names import REFERENCE_SECONDS, check_reference

READ_BYTES = 1 << 16


class UndecodableAudio(ValueError):
    """ffmpeg could not read the file, or it holds no audio; the message says why."""


class AudioTooLong(ValueError):
    """The recording lasts longer than the limit."""


class TooManyChannels(ValueError):
    """The recording has more channels than are transcribed one by one."""


def ffmpeg_available() -> bool:
    """Whether ffmpeg, which decodes every recording, is on the PATH."""
    return shutil.which("ffmpeg") is not None


# Deepgram's multichannel: each channel is transcribed as a recording of its own.
MAX_CHANNELS = 8


async def decode_file(path: Path, max_s: float) -> np.ndarray:
    """The file's audio, downmixed and resampled by ffmpeg; UndecodableAudio with ffmpeg's
    own reason, AudioTooLong past ``max_s``."""
    return (await _decode(path, max_s, 1))[0]


async def decode_channels(path: Path, max_s: float) -> np.ndarray:
    """Each channel of the file's first audio stream, resampled: (channels, samples).
    ``max_s`` bounds the channels' audio together (AudioTooLong past it: each channel
    costs a transcription); TooManyChannels past MAX_CHANNELS."""
    channels = await _channel_count(path)
    if channels > MAX_CHANNELS:
        raise TooManyChannels(f"the recording has {channels} channels; at most {MAX_CHANNELS}")
    return await _decode(path, max_s / channels, channels)


async def _channel_count(path: Path) -> int:
    """How many channels the first audio stream has (ffprobe, beside ffmpeg)."""
    process = await asyncio.create_subprocess_exec(
        "ffprobe",
        "-v",
        "error",
        "-select_streams",
        "a:0",
        "-show_entries",
        "stream=channels",
        "-of",
        "default=noprint_wrappers=1:nokey=1",
        str(path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        raise UndecodableAudio(f"the file could not be decoded: {_reason(err, path)}")
    count = out.decode().split()
    if not count or not count[0].isdigit() or int(count[0]) < 1:
        raise UndecodableAudio("the file holds no audio")
    return int(count[0])


async def _decode(path: Path, max_s: float, channels: int) -> np.ndarray:
    if not ffmpeg_available():
        raise RuntimeError("ffmpeg is needed to decode recordings (apt-get install ffmpeg)")
    process = await asyncio.create_subprocess_exec(
        *ffmpeg_pcm16_command(str(path), channels=channels),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    limit = int(max_s * SAMPLE_RATE) * 2 * channels
    chunks: list[bytes] = []
    size = 0
    assert process.stdout is not None and process.stderr is not None
    errors = asyncio.ensure_future(process.stderr.read())
    try:
        while chunk := await process.stdout.read(READ_BYTES):
            size += len(chunk)
            if size > limit:
                raise AudioTooLong(f"the recording lasts more than {max_s:g} s")
            chunks.append(chunk)
        code = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    stderr = await errors
    if code != 0:
        raise UndecodableAudio(f"the file could not be decoded: {_reason(stderr, path)}")
    frame = 2 * channels
    pcm = b"".join(chunks)
    if len(pcm) < frame:
        raise UndecodableAudio("the file holds no audio")
    samples = np.frombuffer(pcm[: len(pcm) // frame * frame], dtype="<i2")
    return samples.reshape(-1, channels).T.astype(np.float32) / 32768.0


def _reason(stderr: bytes, path: Path) -> str:
    """ffmpeg's (or ffprobe's) last line of error, without the server's temporary path
    that it names its input by."""
    lines = stderr.decode(errors="replace").strip().splitlines()
    return lines[-1].removeprefix(f"{path}: ") if lines else "the decoder failed"


async def decode_reference(path: Path, name: str) -> np.ndarray:
    """A known speaker's clip: decoded as a recording is (UndecodableAudio, AudioTooLong),
    then held to its 2 to 10 s (ValueError)."""
    audio = await decode_file(path, REFERENCE_SECONDS[1] + 1.0)
    check_reference(name, audio)
    return audio
