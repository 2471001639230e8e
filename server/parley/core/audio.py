"""The one sample rate everything inside the server works at (clients' audio is resampled
to it on arrival, and Whisper, the VAD and the speaker models all read it)."""

from collections.abc import Sequence

SAMPLE_RATE = 16000
WHISPER_WINDOW_S = 30.0  # the most audio Whisper reads at once
# The longest segment the VAD may close: with its padding it still fits Whisper's window.
MAX_SEGMENT_S = WHISPER_WINDOW_S - 1.0


def ffmpeg_pcm16_command(
    source: str,
    sample_rate: int = SAMPLE_RATE,
    channels: int = 1,
    input_args: Sequence[str] = (),
) -> list[str]:
    """ffmpeg decoding any file's first audio stream to PCM16 LE on stdout (mono, or
    ``channels`` interleaved), its own errors only on stderr (the client's and the
    server's file readers both run it); ``input_args``: how to read a headerless input."""
    return [
        "ffmpeg",
        "-nostdin",
        "-hide_banner",
        "-loglevel",
        "error",
        *input_args,
        "-i",
        source,
        "-vn",
        "-f",
        "s16le",
        "-acodec",
        "pcm_s16le",
        "-ac",
        str(channels),
        "-ar",
        str(sample_rate),
        "pipe:1",
    ]
