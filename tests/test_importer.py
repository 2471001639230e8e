"""The CTranslate2 → transformers importer: same tokens as CTranslate2 on the original file."""

import json
import shutil

import numpy as np
import pytest
import torch

from audio_fixtures import SAMPLE_WAV, read_wav
from parley.weights.bundle import BUNDLE, ct2_source, verify
from parley.weights.ct2_format import Ct2FormatError, read_ct2_model
from parley.weights.whisper_import import Vocabulary


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The original CTranslate2 directories, fetched the way `parley models install` does."""
    root = tmp_path_factory.mktemp("ct2")
    return {name: ct2_source(name, root / name) for name in BUNDLE}


def hf_greedy(model_dir, features, language):
    from transformers import WhisperForConditionalGeneration

    model = WhisperForConditionalGeneration.from_pretrained(model_dir).eval()
    kwargs = {"language": language, "task": "transcribe"} if language else {}
    with torch.inference_mode():
        tokens = model.generate(torch.from_numpy(features), **kwargs)[0].tolist()
    eot = model.generation_config.eos_token_id
    return [t for t in tokens if t < eot]


def ct2_greedy(source_dir, features, prompt):
    import ctranslate2

    model = ctranslate2.models.Whisper(str(source_dir), device="cpu", compute_type="float32")
    result = model.generate(ctranslate2.StorageView.from_array(features), [prompt], beam_size=1)
    return result[0].sequences_ids[0]


@pytest.mark.parametrize("name, language", [("tiny.en", None), ("base", "en")])
def test_imported_weights_decode_like_ctranslate2(name, language, sources, models_dir):
    """Greedy decoding of sample.wav gives CTranslate2's tokens, token for token."""
    from transformers import WhisperFeatureExtractor

    model_dir = models_dir / name
    features = WhisperFeatureExtractor.from_pretrained(model_dir)(
        read_wav(SAMPLE_WAV), sampling_rate=16000, return_tensors="np"
    ).input_features
    features = np.ascontiguousarray(features, dtype=np.float32)
    prompt = (
        ["<|startoftranscript|>"]
        + ([f"<|{language}|>", "<|transcribe|>"] if language else [])
        + ["<|notimestamps|>"]
    )
    expected = ct2_greedy(sources[name], features, prompt)
    assert len(expected) > 90  # the whole 30 s conversation
    assert hf_greedy(model_dir, features, language) == expected


@pytest.mark.parametrize("name", list(BUNDLE))
def test_tokenizer_ids_match_the_vocabulary(name, sources, models_dir):
    """Every token id, timestamps included, is the token vocabulary.txt lists."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(models_dir / name)
    vocabulary = Vocabulary.read(sources[name] / "vocabulary.txt")
    assert len(tokenizer) == len(vocabulary.tokens)
    assert tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))) == vocabulary.tokens
    assert "<|startoftranscript|>" in tokenizer.all_special_tokens
    assert (
        tokenizer.decode(
            tokenizer.convert_tokens_to_ids(["<|0.00|>", "ĠHello", "<|1.00|>"]),
            skip_special_tokens=True,
        ).strip()
        == "Hello"
    )


def test_generation_config_carries_ct2_settings(sources, models_dir):
    """Suppression lists and alignment heads come from the CTranslate2 config."""
    from transformers import GenerationConfig

    ct2 = json.loads((sources["base"] / "config.json").read_text())
    generation = GenerationConfig.from_pretrained(models_dir / "base")
    assert generation.suppress_tokens == ct2["suppress_ids"]
    assert generation.begin_suppress_tokens == ct2["suppress_ids_begin"]
    assert generation.alignment_heads == ct2["alignment_heads"]
    assert generation.lang_to_id["<|en|>"] == 50259 and generation.is_multilingual


def test_verify_notices_a_changed_file(models_dir, tmp_path):
    """A model file that differs from its manifest fails verification."""
    copy = tmp_path / "tiny.en"
    shutil.copytree(models_dir / "tiny.en", copy)
    assert verify(copy) == []
    with open(copy / "config.json", "a") as f:
        f.write(" ")
    assert any("checksum" in p for p in verify(copy))
    (copy / "tokenizer.json").unlink()
    assert any("missing" in p for p in verify(copy))


def test_a_truncated_model_bin_is_refused(sources, tmp_path):
    """A cut-off model.bin is a format error, not a silent partial model."""
    data = (sources["tiny.en"] / "model.bin").read_bytes()
    (tmp_path / "model.bin").write_bytes(data[: len(data) // 3])
    with pytest.raises(Ct2FormatError):
        read_ct2_model(tmp_path / "model.bin")


def test_an_installed_model_is_readable_by_other_users(tmp_path):
    """Staged private (the staging directory, safetensors' 0600 file), installed as the
    umask allows: a service user reads what root installed."""
    import os
    import stat

    from parley.weights.bundle import _permit_as_umask_allows

    (tmp_path / "tiny.en" / "sub").mkdir(parents=True)
    weights = tmp_path / "tiny.en" / "model.safetensors"
    weights.write_bytes(b"weights")
    for path, mode in (
        (weights, 0o600),
        (tmp_path / "tiny.en" / "sub", 0o700),
        (tmp_path / "tiny.en", 0o700),
    ):
        path.chmod(mode)
    previous = os.umask(0o022)
    try:
        _permit_as_umask_allows(tmp_path / "tiny.en")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(weights.stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "tiny.en").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "tiny.en" / "sub").stat().st_mode) == 0o755


def test_the_bundle_runs_in_transformers_batched_pipeline(models_dir):
    """The imported model loads in transformers' own ASR pipeline as a hub checkpoint does
    (the reference handler's way: chunk_length_s=30, batch_size>1 pads with the tokenizer's
    pad token) and transcribes sample.wav."""
    import torch
    from transformers import pipeline

    from audio_fixtures import sample_reference_text, wer

    asr = pipeline(
        "automatic-speech-recognition",
        model=str(models_dir / "tiny.en"),
        device="cpu",
        dtype=torch.float32,
    )
    text = asr(
        {"raw": read_wav(SAMPLE_WAV), "sampling_rate": 16000}, chunk_length_s=30, batch_size=2
    )["text"]
    assert wer(sample_reference_text(), text) < 0.3
