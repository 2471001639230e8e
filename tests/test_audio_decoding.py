"""Client audio → 16 kHz mono float32 for each encoding, rate and channel count."""

import numpy as np
import pytest

from parley.protocol.audio import AudioDecoder
from parley.protocol.messages import Encoding, ErrorCode, ProtocolError, StreamConfig


def tone(rate: int, seconds: float, hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def dominant_hz(audio: np.ndarray, rate: int = 16000) -> float:
    spectrum = np.abs(np.fft.rfft(audio))
    return float(np.fft.rfftfreq(len(audio), 1 / rate)[np.argmax(spectrum)])


def decode_all(decoder: AudioDecoder, data: bytes, chunk: int) -> np.ndarray:
    parts = [decoder.decode(data[i : i + chunk]) for i in range(0, len(data), chunk)]
    return np.concatenate(parts + [decoder.finish()])


def test_pcm16_at_16k_passes_through_exactly():
    """PCM16 at 16 kHz is only scaled to [-1, 1)."""
    samples = np.array([0, 16384, -32768, 32767], dtype="<i2")
    out = AudioDecoder(StreamConfig()).decode(samples.tobytes())
    np.testing.assert_allclose(out, samples / 32768.0)


@pytest.mark.parametrize("rate", [8000, 22050, 44100, 48000])
def test_resampling_keeps_length_and_pitch(rate):
    """Any rate comes out at 16 kHz, streamed in pieces, with the same duration and pitch."""
    audio = tone(rate, 2.0)
    pcm = (audio * 32767).astype("<i2").tobytes()
    out = decode_all(AudioDecoder(StreamConfig(sample_rate=rate)), pcm, chunk=2 * 1000)
    assert abs(len(out) - 32000) <= 2
    assert abs(dominant_hz(out) - 440) < 2


def test_float32_stereo_is_downmixed():
    """Interleaved stereo float32 becomes the mean of its channels."""
    left, right = np.full(160, 0.5, np.float32), np.full(160, -0.1, np.float32)
    interleaved = np.stack([left, right], axis=1).reshape(-1).astype("<f4")
    config = StreamConfig(encoding=Encoding.PCM_F32LE, channels=2)
    out = AudioDecoder(config).decode(interleaved.tobytes())
    np.testing.assert_allclose(out, np.full(160, 0.2), atol=1e-6)


def test_mulaw_8k_decodes_to_the_original_tone():
    """G.711 mu-law at 8 kHz (telephony) decodes and upsamples to the same tone."""
    audio = tone(8000, 1.0, 300)
    # mu-law encode by the G.711 formula, to check the decoder against it
    magnitude = np.log1p(255 * np.abs(audio)) / np.log1p(255)
    codes = np.round(np.sign(audio) * magnitude * 127).astype(int)
    encoded = np.where(codes >= 0, 0xFF - codes, 0x7F + codes).astype(np.uint8)
    out = decode_all(
        AudioDecoder(StreamConfig(encoding=Encoding.MULAW, sample_rate=8000)),
        encoded.tobytes(),
        chunk=160,
    )
    assert abs(dominant_hz(out) - 300) < 2
    assert 0.4 < np.max(np.abs(out)) < 0.6


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # audioop, here only as a reference
@pytest.mark.parametrize(
    "encoding, expand", [(Encoding.MULAW, "ulaw2lin"), (Encoding.ALAW, "alaw2lin")]
)
def test_g711_codes_decode_as_the_standard_library_does(encoding, expand):
    """Every mu-law and A-law code decodes to the value Python's audioop gives it."""
    audioop = pytest.importorskip(  # the project supports Python 3.11 and later
        "audioop", reason="the reference, audioop, left the standard library in Python 3.13"
    )
    codes = bytes(range(256))
    expected = np.frombuffer(getattr(audioop, expand)(codes, 2), dtype="<i2") / 32768.0
    out = AudioDecoder(StreamConfig(encoding=encoding)).decode(codes)
    np.testing.assert_array_equal(out, expected.astype(np.float32))


@pytest.mark.parametrize(
    "config, size",
    [
        (StreamConfig(), 3),
        (StreamConfig(encoding=Encoding.PCM_F32LE), 6),
        (StreamConfig(channels=2), 6),
    ],
)
def test_a_partial_sample_frame_is_bad_audio(config, size):
    """A message that is not whole sample frames is refused with bad_audio."""
    with pytest.raises(ProtocolError) as caught:
        AudioDecoder(config).decode(bytes(size))
    assert caught.value.code is ErrorCode.BAD_AUDIO and "not a whole number" in caught.value.message


def test_nan_float_audio_is_bad_audio():
    """float32 audio holding NaN is refused rather than fed to the models."""
    data = np.array([0.1, np.nan], dtype="<f4").tobytes()
    with pytest.raises(ProtocolError) as caught:
        AudioDecoder(StreamConfig(encoding=Encoding.PCM_F32LE)).decode(data)
    assert caught.value.code is ErrorCode.BAD_AUDIO
