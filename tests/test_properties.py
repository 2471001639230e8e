"""Property tests of everything a client can send: any input gives a value or a
documented ProtocolError, never another exception (which would end the session with
internal_error instead of the documented answer)."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parley.protocol.audio import AudioDecoder
from parley.protocol.errors import close_reason
from parley.protocol.messages import (
    ControlType,
    Encoding,
    ErrorCode,
    ProtocolError,
    StreamConfig,
    control_fields,
)

PARAMETERS = ["encoding", "sample_rate", "channels", "language", "partials", "diarization", "token"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(
    st.one_of(
        st.text(),
        json_values.map(json.dumps),
        st.dictionaries(st.sampled_from(["type", "data", ""]), json_values).map(json.dumps),
        st.sampled_from([c.value for c in ControlType]).map(lambda t: json.dumps({"type": t})),
        st.integers(1, 200_000).map(lambda depth: "[" * depth + "]" * depth),
    )
)
def test_any_text_message_is_a_control_type_or_bad_message(text):
    """control_fields answers every string with a ControlType or a bad_message error."""
    try:
        kind = ControlType(control_fields(text)["type"])
    except ProtocolError as exc:
        assert exc.code is ErrorCode.BAD_MESSAGE and exc.message
    else:
        assert isinstance(kind, ControlType)


query_values = st.one_of(
    st.text(),
    st.integers(-(10**6), 10**6).map(str),
    st.sampled_from(["true", "false", "pcm_s16le", "mulaw", "en", "16000"]),
)


@given(st.dictionaries(st.one_of(st.sampled_from(PARAMETERS), st.text()), query_values))
def test_any_query_is_a_config_or_bad_config(params):
    """from_query answers every parameter mapping with a config or a bad_config error."""
    try:
        config = StreamConfig.from_query(params)
    except ProtocolError as exc:
        assert exc.code is ErrorCode.BAD_CONFIG and exc.message
    else:
        assert StreamConfig.MIN_RATE <= config.sample_rate <= StreamConfig.MAX_RATE
        assert 1 <= config.channels <= StreamConfig.MAX_CHANNELS


configs = st.builds(
    StreamConfig,
    encoding=st.sampled_from(list(Encoding)),
    sample_rate=st.sampled_from([8000, 16000, 22050, 44100, 48000]),
    channels=st.integers(1, 3),
)


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=60)
@given(configs, st.lists(st.binary(max_size=2048), min_size=1, max_size=4))
def test_any_bytes_are_audio_or_bad_audio(config, frames):
    """Any binary message decodes to finite 16 kHz samples in [-1, 1], or bad_audio."""
    decoder = AudioDecoder(config)
    for frame in frames:
        try:
            samples = decoder.decode(frame)
        except ProtocolError as exc:
            assert exc.code is ErrorCode.BAD_AUDIO and exc.message
            continue
        assert samples.dtype == np.float32 and samples.ndim == 1
        assert np.all(np.isfinite(samples))
        assert np.all(np.abs(samples) <= 1.5)  # resampling may ring a little past full scale
    decoder.finish()


@given(st.text(), st.integers(0, 200))
def test_close_reasons_fit_the_websocket_limit(text, extra):
    """A close reason is cut to at most 123 bytes of UTF-8, on a character boundary."""
    reason = close_reason(text * (1 + extra % 5))
    encoded = reason.encode("utf-8")
    assert len(encoded) <= 123
    assert (text * (1 + extra % 5)).startswith(reason.removesuffix("…"))
