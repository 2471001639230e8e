"""Any recording ffmpeg reads, decoded to 16 kHz mono float32, within a duration limit.

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


def ffmpeg_available() -> bool:
    """Whether ffmpeg, which decodes every recording, is on the PATH."""
    return shutil.which("ffmpeg") is not None


async def decode_file(path: Path, max_s: float) -> np.ndarray:
    """The file's audio, downmixed and resampled by ffmpeg; UndecodableAudio with ffmpeg's
    own reason, AudioTooLong past ``max_s``."""
    if not ffmpeg_available():
        raise RuntimeError("ffmpeg is needed to decode recordings (apt-get install ffmpeg)")
    process = await asyncio.create_subprocess_exec(
        *ffmpeg_pcm16_command(str(path)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    limit = int(max_s * SAMPLE_RATE) * 2
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
    reason = (await errors).decode(errors="replace").strip()
    if code != 0:
        last = reason.splitlines()[-1] if reason else f"ffmpeg exited with {code}"
        # ffmpeg names its input first; the caller never sees the server's temporary path
        last = last.removeprefix(f"{path}: ")
        raise UndecodableAudio(f"the file could not be decoded: {last}")
    pcm = b"".join(chunks)
    if len(pcm) < 2:
        raise UndecodableAudio("the file holds no audio")
    return np.frombuffer(pcm[: len(pcm) // 2 * 2], dtype="<i2").astype(np.float32) / 32768.0


async def decode_reference(path: Path, name: str) -> np.ndarray:
    """A known speaker's clip: decoded as a recording is (UndecodableAudio, AudioTooLong),
    then held to its 2 to 10 s (ValueError)."""
    audio = await decode_file(path, REFERENCE_SECONDS[1] + 1.0)
    check_reference(name, audio)
    return audio
