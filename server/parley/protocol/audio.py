"""Client audio frames → 16 kHz mono float32, for every encoding protocol.md allows."""

from __future__ import annotations

import numpy as np
import soxr

from parley.core.audio import SAMPLE_RATE as TARGET_RATE
from parley.protocol.messages import Encoding, ErrorCode, ProtocolError, StreamConfig


def _mulaw_table() -> np.ndarray:
    # ITU-T G.711 mu-law expansion of all 256 codes, scaled to [-1, 1].
    codes = ~np.arange(256, dtype=np.uint8)
    sign = (codes & 0x80) != 0
    exponent = (codes >> 4) & 0x07
    mantissa = codes & 0x0F
    magnitude = ((mantissa.astype(np.int32) << 3) + 0x84) << exponent
    linear = np.where(sign, 0x84 - magnitude, magnitude - 0x84)
    return (linear / 32768.0).astype(np.float32)


def _alaw_table() -> np.ndarray:
    # ITU-T G.711 A-law expansion of all 256 codes (even bits inverted), scaled to [-1, 1].
    codes = np.arange(256, dtype=np.uint8) ^ 0x55
    sign = (codes & 0x80) != 0
    exponent = (codes >> 4) & 0x07
    mantissa = (codes & 0x0F).astype(np.int32)
    magnitude = np.where(
        exponent == 0,
        (mantissa << 4) + 8,
        ((mantissa << 4) + 0x108) << np.maximum(exponent.astype(np.int32) - 1, 0),
    )
    linear = np.where(sign, magnitude, -magnitude)
    return (linear / 32768.0).astype(np.float32)


_MULAW = _mulaw_table()
_ALAW = _alaw_table()


class AudioDecoder:
    """Decodes one stream's binary messages; holds that stream's resampler state."""

    def __init__(self, config: StreamConfig):
        self.config = config
        self._resampler = (
            soxr.ResampleStream(config.sample_rate, TARGET_RATE, 1, dtype="float32", quality="HQ")
            if config.sample_rate != TARGET_RATE
            else None
        )

    def decode(self, frame: bytes) -> np.ndarray:
        """One binary message → 16 kHz mono float32; ProtocolError(BAD_AUDIO) if malformed."""
        width = self.config.bytes_per_frame
        if len(frame) % width:
            raise ProtocolError(
                ErrorCode.BAD_AUDIO,
                f"audio message of {len(frame)} bytes is not a whole number of "
                f"{width}-byte sample frames ({self.config.encoding.value}, "
                f"{self.config.channels} channel(s)); the message was dropped",
            )
        encoding = self.config.encoding
        if encoding is Encoding.PCM_S16LE:
            samples = np.frombuffer(frame, dtype="<i2").astype(np.float32) / 32768.0
        elif encoding is Encoding.PCM_F32LE:
            samples = np.frombuffer(frame, dtype="<f4").astype(np.float32)
            if not np.all(np.isfinite(samples)):
                raise ProtocolError(
                    ErrorCode.BAD_AUDIO,
                    "float32 audio holds NaN or infinity; the message was dropped",
                )
            samples = np.clip(samples, -1.0, 1.0)
        elif encoding is Encoding.MULAW:
            samples = _MULAW[np.frombuffer(frame, dtype=np.uint8)]
        else:
            samples = _ALAW[np.frombuffer(frame, dtype=np.uint8)]
        if self.config.channels > 1:
            samples = samples.reshape(-1, self.config.channels).mean(axis=1, dtype=np.float32)
        return self._resample(samples, last=False)

    def finish(self) -> np.ndarray:
        """What the resampler still holds at the end of the stream."""
        return self._resample(np.zeros(0, dtype=np.float32), last=True)

    def _resample(self, samples: np.ndarray, last: bool) -> np.ndarray:
        if self._resampler is None:
            return samples
        return self._resampler.resample_chunk(samples, last=last)
