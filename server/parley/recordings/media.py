"""Any recording ffmpeg reads, decoded to 16 kHz float32 (mono, or each channel apart),
within a duration limit.

ffmpeg runs as a child process that reads the upload's temporary file and writes raw
samples to a pipe; nothing is kept past ``max_s``, so a long upload costs at most the
limit's worth of memory (20 minutes: 77 MB of float32).
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from parley.core.audio import SAMPLE_RATE, ffmpeg_pcm16_command
from parley.core.speaker_names import REFERENCE_SECONDS, check_reference

READ_BYTES = 1 << 16
# Deepgram's multichannel: each channel is transcribed as a recording of its own.
MAX_CHANNELS = 8
# How container files begin, (offset, bytes): a body that begins so is read by its header
# whatever encoding its sender named (ffprobe's guess from raw samples is not safe: it
# takes some PCM for ADPCM).
CONTAINER_MAGIC = (
    *((0, magic) for magic in (b"RIFF", b"RF64", b"OggS", b"fLaC", b"ID3", b"FORM", b"caff")),
    (0, b"#!AMR"),
    (0, b"\x1a\x45\xdf\xa3"),  # Matroska, WebM
    (0, b"\x30\x26\xb2\x75"),  # ASF
    (4, b"ftyp"),  # MP4, M4A, MOV
)


class UndecodableAudio(ValueError):
    """ffmpeg could not read the file, or it holds no audio; the message says why."""


class AudioTooLong(ValueError):
    """The recording lasts longer than the limit."""


class TooManyChannels(ValueError):
    """The recording has more channels than are transcribed one by one."""


def ffmpeg_available() -> bool:
    """Whether ffmpeg, which decodes every recording, and its ffprobe, which counts a
    recording's channels, are on the PATH (Debian's ffmpeg package has both)."""
    return shutil.which("ffmpeg") is not None and shutil.which("ffprobe") is not None


@dataclass(frozen=True)
class RawAudio:
    """What headerless audio is, as its sender says (nothing in it tells ffmpeg)."""

    demuxer: str  # ffmpeg's raw format: s16le, mulaw, alaw
    sample_rate: int
    channels: int = 1

    def input_args(self) -> list[str]:
        return ["-f", self.demuxer, "-ar", str(self.sample_rate), "-ac", str(self.channels)]


async def decode_file(path: Path, max_s: float, raw: RawAudio | None = None) -> np.ndarray:
    """The file's audio, downmixed and resampled by ffmpeg (read as ``raw`` where no
    container is found); UndecodableAudio with ffmpeg's own reason, AudioTooLong past
    ``max_s``."""
    return (await _decode_any(path, max_s, raw, apart=False))[0]


async def decode_channels(path: Path, max_s: float, raw: RawAudio | None = None) -> np.ndarray:
    """Each channel of the file's first audio stream, resampled: (channels, samples).
    ``max_s`` bounds the channels' audio together (AudioTooLong past it: each channel
    costs a transcription); TooManyChannels past MAX_CHANNELS."""
    return await _decode_any(path, max_s, raw, apart=True)


def has_container(path: Path) -> bool:
    """Whether the file begins as a container does (WAV, Ogg, FLAC, MP3 with its tag,
    MP4, Matroska or WebM, AIFF, CAF, AMR, ASF)."""
    with path.open("rb") as file:
        head = file.read(12)
    return any(head[at:].startswith(magic) for at, magic in CONTAINER_MAGIC)


async def _decode_any(path: Path, max_s: float, raw: RawAudio | None, apart: bool) -> np.ndarray:
    if not ffmpeg_available():
        raise RuntimeError("ffmpeg is needed to decode recordings (apt-get install ffmpeg)")
    if raw is not None and has_container(path):
        raw = None
    if raw is not None:
        channels = raw.channels if apart else 1
    else:
        channels = await _channel_count(path) if apart else 1
    if channels > MAX_CHANNELS:
        raise TooManyChannels(f"the recording has {channels} channels; at most {MAX_CHANNELS}")
    return await _decode(path, max_s / channels, channels, raw)


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


async def _decode(
    path: Path, max_s: float, channels: int, raw: RawAudio | None = None
) -> np.ndarray:
    process = await asyncio.create_subprocess_exec(
        *ffmpeg_pcm16_command(
            str(path), channels=channels, input_args=raw.input_args() if raw else ()
        ),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    limit = int(max_s * SAMPLE_RATE) * 2 * channels
    pcm = bytearray()
    assert process.stdout is not None and process.stderr is not None
    errors = asyncio.ensure_future(process.stderr.read())
    try:
        while chunk := await process.stdout.read(READ_BYTES):
            if len(pcm) + len(chunk) > limit:
                raise AudioTooLong(f"the recording lasts more than {max_s:g} s")
            pcm += chunk
        code = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    stderr = await errors
    if code != 0:
        raise UndecodableAudio(f"the file could not be decoded: {_reason(stderr, path)}")
    frames = len(pcm) // (2 * channels)
    if frames == 0:
        raise UndecodableAudio("the file holds no audio")
    samples = np.frombuffer(pcm, dtype="<i2", count=frames * channels).reshape(-1, channels).T
    # Scaled as it is converted: the 16-bit samples and one float32 array at most (a
    # conversion, then a division, held both float32 arrays and the bytes twice over:
    # three times the recording's audio, bench/README.md "A long recording's memory").
    return np.multiply(samples, np.float32(1 / 32768), dtype=np.float32)


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
