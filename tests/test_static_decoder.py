"""The static decoder: same choices as transformers' decoder, free rollback, flat memory.

The CUDA-graph replay itself needs a GPU (bench/gpu_check.sh runs it there); what can be
checked here is that the forward it captures matches transformers' decoder, has no
data-dependent Python (it traces as one graph), and rolls back by position alone.
"""

import pytest
import torch

from audio_fixtures import SAMPLE_WAV, read_wav
from parley.models.bundle import resolve_model
from parley.models.decoder_state import DynamicDecoder
from parley.models.device import plan_device
from parley.models.static_decoder import StaticDecoder
from parley.models.whisper_engine import WhisperEngine


@pytest.fixture(scope="module")
def dynamic_engine(models_dir):
    return WhisperEngine(resolve_model("tiny.en", models_dir), "tiny.en", plan_device("cpu"),
                         cache="dynamic")


@pytest.fixture(scope="module")
def encoded(tiny_engine):
    audio = read_wav(SAMPLE_WAV)[int(6.4 * 16000):int(21.0 * 16000)]
    with torch.inference_mode():
        return tiny_engine.model.model.encoder(tiny_engine.features(audio)).last_hidden_state


def test_static_and_dynamic_engines_decode_the_same_tokens(tiny_engine, dynamic_engine):
    """Real weights, real audio, growing prefixes with drafts: both caches, same tokens."""
    assert isinstance(tiny_engine.verifier._single, StaticDecoder)
    sample = read_wav(SAMPLE_WAV)
    previous, total = None, 0
    for end in (9.0, 12.0, 15.0, 21.0):
        audio = sample[int(6.4 * 16000):int(end * 16000)]
        static = tiny_engine.transcribe(audio, draft=previous, with_words=True)
        dynamic = dynamic_engine.transcribe(audio, draft=previous, with_words=True)
        assert static.tokens == dynamic.tokens and static.tokens
        assert static.words == dynamic.words
        previous, total = static.tokens, total + len(static.tokens)
    assert total > 60


def test_rollback_moves_the_position_and_overwrites(tiny_engine, encoded):
    """Hidden states after a rollback equal those of a decode that never took the detour."""
    decoder = tiny_engine.model.model.decoder
    static = StaticDecoder(decoder)
    prompt = tiny_engine.sot_sequence("en")
    with torch.inference_mode():
        reference = DynamicDecoder(decoder).begin(encoded)
        reference.feed(prompt)
        expected = reference.feed([400, 500, 600])
        state = static.begin(encoded)
        state.feed(prompt)
        state.feed([11, 12, 13, 14, 15, 16])  # a rejected draft
        state.truncate(len(prompt))
        got = state.feed([400, 500, 600])
    assert state.length == len(prompt) + 3
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_memory_stays_flat_and_a_stale_decode_is_refused(tiny_engine, encoded):
    """Buffers are allocated once: many decodes later they are the same tensors."""
    static = StaticDecoder(tiny_engine.model.model.decoder)
    buffers = [static._self_k.data_ptr(), static._cross_k.data_ptr()]
    with torch.inference_mode():
        for _ in range(3):
            state = static.begin(encoded)
            state.feed(list(range(1000, 1000 + static.max_positions)))  # the longest sequence
        with pytest.raises(ValueError, match="at most"):
            state.feed([1])
        newer = static.begin(encoded)
        with pytest.raises(RuntimeError, match="later decode"):
            state.feed([1])
        newer.feed([1])
    assert [static._self_k.data_ptr(), static._cross_k.data_ptr()] == buffers


def test_the_captured_forward_is_one_graph(tiny_engine, encoded):
    """What CUDA graphs capture must have no data-dependent Python: it traces whole.

    ``fullgraph=True`` makes any graph break (``.item()``, a branch on a tensor) an
    error, which is what would break capture on a GPU. The traced forward, run at a
    padded width over every slot as a replay does, also gives the eager numbers.
    """
    static = StaticDecoder(tiny_engine.model.model.decoder)
    traced = torch.compile(static._forward, backend="eager", fullgraph=True)
    with torch.inference_mode():
        state = static.begin(encoded)
        state.feed(tiny_engine.sot_sequence("en"))
        ids = torch.tensor([[400, 500, 500, 500]])  # 2 tokens padded to a width of 4
        positions = torch.arange(state.length, state.length + 4)
        padded = traced(ids, positions, static._slots)[0, :2]
        exact = static._forward(ids[:, :2], positions[:2], state.length + 2)[0]
    torch.testing.assert_close(padded, exact, rtol=1e-4, atol=1e-4)
