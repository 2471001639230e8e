"""int8 linear layers on a CPU: each row's result is its own, whatever it is batched with,
and close to float32's; the precision is chosen by the device plan (int8, or a bfloat16
encoder)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from audio_fixtures import SAMPLE_WAV, read_wav, sample_reference_text, wer
from parley.models import device
from parley.models.device import has_bfloat16_matrices, plan_device
from parley.models.encoder import encoder_layers
from parley.models.int8 import RowwiseInt8Linear, quantize_linears
from parley.models.whisper_engine import WhisperEngine
from parley.weights.bundle import resolve_model


def linear(seed: int, bias: bool = True) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(64, 96, bias=bias)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    rows=st.integers(1, 12),
    scales=st.lists(st.floats(1e-3, 1e3), min_size=12, max_size=12),
    bias=st.booleans(),
)
def test_a_row_gives_the_same_numbers_alone_and_in_any_batch(seed, rows, scales, bias):
    """Rows of very different magnitudes batched together give exactly what each gives
    alone: no row's quantization depends on another's (torch's own dynamic quantization
    shares one scale per tensor, so there it would)."""
    layer = RowwiseInt8Linear(linear(seed, bias))
    torch.manual_seed(seed + 1)
    x = torch.randn(rows, 64) * torch.tensor(scales[:rows])[:, None]
    with torch.inference_mode():
        together = layer(x)
        alone = torch.cat([layer(x[i : i + 1]) for i in range(rows)])
    assert torch.equal(together, alone)


def test_int8_is_close_to_float32_and_keeps_the_input_shape():
    """Relative error of a few per cent at most, bias included, for 3-D inputs too."""
    plain = linear(7)
    layer = RowwiseInt8Linear(plain)
    x = torch.randn(3, 5, 64)
    with torch.inference_mode():
        want, got = plain(x), layer(x)
    assert got.shape == want.shape == (3, 5, 96)
    assert ((got - want).norm() / want.norm()).item() < 0.03


def test_a_rows_worth_of_zeros_stays_zero_plus_the_bias():
    layer = RowwiseInt8Linear(linear(3))
    with torch.inference_mode():
        out = layer(torch.zeros(2, 64))
    assert torch.allclose(out, layer.bias.expand(2, -1))


def test_every_linear_layer_is_replaced_and_nothing_else():
    model = torch.nn.Sequential(linear(1), torch.nn.GELU(), torch.nn.LayerNorm(96))
    assert quantize_linears(model) == 1
    assert [type(m).__name__ for m in model] == ["RowwiseInt8Linear", "GELU", "LayerNorm"]


def test_the_plan_chooses_the_precision():
    """auto is bfloat16 on a CPU with bfloat16 matrix instructions, float32 on one
    without; int8 is asked for; int8 cannot be asked of CUDA; both lower precisions read
    the output head in int8."""
    assert plan_device("cpu").bfloat16_encoder == has_bfloat16_matrices()
    assert not plan_device("cpu").int8 and not plan_device("cpu", "float32").int8
    assert not plan_device("cpu", "float32").bfloat16_encoder
    assert plan_device("cpu", "int8").int8
    assert plan_device("cpu", "int8").description == "cpu float32, encoder and output head int8"
    bfloat16 = plan_device("cpu", "bfloat16")
    assert bfloat16.bfloat16_encoder and not bfloat16.int8
    assert bfloat16.description == "cpu float32, encoder bfloat16, output head int8"
    assert plan_device("cpu", "int8").int8_head and bfloat16.int8_head
    assert not plan_device("cpu", "float32").int8_head
    with pytest.raises(ValueError, match="compute type must be one of"):
        plan_device("cpu", "int4")
    if torch.cuda.is_available():
        for compute in ("int8", "bfloat16"):
            with pytest.raises(ValueError, match=f"{compute} is for the CPU"):
                plan_device("cuda", compute)


@pytest.mark.parametrize(
    ("flags", "bfloat16"),
    [
        ("fpu sse2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8", True),  # AMX
        ("fpu sse2 avx512f avx512_bf16 avx512_vnni", True),  # AVX-512 BF16 alone
        ("fpu sse2 avx2 avx512f avx512_vnni", False),  # AVX-512 without BF16
        (None, False),  # no /proc/cpuinfo (not Linux)
    ],
)
def test_bfloat16_matrices_are_read_from_the_cpu_flags(tmp_path, monkeypatch, flags, bfloat16):
    """bfloat16 matrix instructions (AMX's tiles, AVX-512's BF16 dot products) are what
    make ``auto`` choose bfloat16 on a CPU."""
    cpuinfo = tmp_path / "cpuinfo"
    if flags is not None:
        cpuinfo.write_text(f"processor\t: 0\nmodel name\t: a CPU\nflags\t\t: {flags}\n")
    monkeypatch.setattr(device, "CPUINFO", cpuinfo)
    device.cpu_flags.cache_clear()
    try:
        assert has_bfloat16_matrices() is bfloat16
        assert plan_device("cpu").bfloat16_encoder is bfloat16
    finally:
        device.cpu_flags.cache_clear()


CLIPS = [(6.4, 14.0), (14.0, 21.0), (21.0, 30.0)]  # seconds of sample.wav


@pytest.fixture(scope="module")
def float32_texts(tiny_engine):
    """float32's texts of ``CLIPS``, decoded once for both precisions."""
    sample = read_wav(SAMPLE_WAV)
    return [tiny_engine.transcribe(sample[int(a * 16000) : int(b * 16000)]).text for a, b in CLIPS]


@pytest.mark.parametrize("compute", ["int8", "bfloat16"])
def test_a_whisper_engine_in_lower_precision_transcribes_like_float32(
    float32_texts, models_dir, compute
):
    """tiny.en with its encoder's linear layers in int8, or its encoder in bfloat16, and
    the output projection read in int8 (its best tokens again in float32), is about
    as accurate as float32 on sample.wav; drafts (the last hypothesis) change no token,
    and a clip's encoder output is the same alone and batched with others."""
    engine = WhisperEngine(
        resolve_model("tiny.en", models_dir), "tiny.en", plan_device("cpu", compute)
    )
    quantized = {
        name.split(".")[1]
        for name, module in engine.model.named_modules()
        if isinstance(module, RowwiseInt8Linear)
    }
    # The decoder stays float32; the int8 head reads proj_out in int8.
    assert quantized == ({"encoder"} if compute == "int8" else set())
    sample = read_wav(SAMPLE_WAV)
    clips = [sample[int(start * 16000) : int(end * 16000)] for start, end in CLIPS]
    plain = [engine.transcribe(audio) for audio in clips]
    said = sample_reference_text()
    lower = " ".join(result.text for result in plain)
    assert wer(said, lower) <= wer(said, " ".join(float32_texts)) + 0.05
    # One clip drafted is enough to see a draft change nothing (each costs a decode).
    first = plain[0]
    drafted = engine.transcribe(clips[0], draft=first.tokens[: len(first.tokens) // 2])
    assert drafted.text == first.text
    encoder = engine.model.model.encoder
    features = torch.randn(2, 80, 3000)  # two clips: a batch, at the least cost
    with torch.inference_mode():
        together = encoder(features).last_hidden_state
        alone = encoder(features[1:2]).last_hidden_state
    assert together.dtype == torch.float32 and torch.equal(together[1:2], alone)
    # Partials encode a short window through the same modules, in the same precision.
    with torch.inference_mode():
        short = encoder_layers(encoder, features[1:2], 250)
        whole = encoder_layers(encoder, features[1:2], encoder.config.max_source_positions)
    assert short.dtype == torch.float32 and short.shape[:2] == (1, 250)
    assert torch.equal(whole, alone)
