"""Import a CTranslate2 Whisper model directory into transformers' format.

The source directory holds ``model.bin`` (CTranslate2 binary), ``config.json``
(suppression lists, alignment heads, language ids), ``tokenizer.json`` and
``vocabulary.txt``. The output is a directory that
``WhisperForConditionalGeneration.from_pretrained`` and ``AutoProcessor`` load
without any network access.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from parley.weights.ct2_format import Ct2Model, read_ct2_model

N_MELS_FOR_ALL_BUNDLED = 80  # checked against conv1's weight shape below
TIMESTAMP_COUNT = 1501  # <|0.00|> … <|30.00|> in steps of 0.02 s
_LANGUAGE_TOKEN = re.compile(r"^<\|([a-z]{2,3}|haw|yue)\|>$")


@dataclass(frozen=True)
class WhisperShape:
    """The dimensions of a Whisper model, read from its CTranslate2 file."""

    d_model: int
    n_mels: int
    vocab_size: int
    encoder_layers: int
    decoder_layers: int
    encoder_heads: int
    decoder_heads: int
    encoder_ffn: int
    decoder_ffn: int
    max_source_positions: int
    max_target_positions: int


def _count_layers(model: Ct2Model, prefix: str) -> int:
    layer = re.compile(rf"^{prefix}/layer_(\d+)/")
    indices = {int(m.group(1)) for name in model.variables if (m := layer.match(name))}
    if indices != set(range(len(indices))):
        raise ValueError(f"{prefix} layers are not numbered 0..n-1: {sorted(indices)}")
    return len(indices)


def infer_shape(model: Ct2Model) -> WhisperShape:
    """The Whisper dimensions of a CTranslate2 model, read from its weights' shapes."""
    if model.spec_name != "WhisperSpec":
        raise ValueError(f"not a Whisper model: spec {model.spec_name!r}")
    conv1 = model.get("encoder/conv1/weight")
    return WhisperShape(
        d_model=conv1.shape[0],
        n_mels=conv1.shape[1],
        vocab_size=model.get("decoder/embeddings/weight").shape[0],
        encoder_layers=_count_layers(model, "encoder"),
        decoder_layers=_count_layers(model, "decoder"),
        encoder_heads=model.scalar("encoder/num_heads"),
        decoder_heads=model.scalar("decoder/num_heads"),
        encoder_ffn=model.get("encoder/layer_0/ffn/linear_0/weight").shape[0],
        decoder_ffn=model.get("decoder/layer_0/ffn/linear_0/weight").shape[0],
        max_source_positions=model.get("encoder/position_encodings/encodings").shape[0],
        max_target_positions=model.get("decoder/position_encodings/encodings").shape[0],
    )


def _split_rows(array: np.ndarray, parts: int) -> list[np.ndarray]:
    return np.split(array, parts, axis=0)


def _layer_tensors(model: Ct2Model, src: str, dst: str, decoder: bool) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}

    def norm(ct2_name: str, hf_name: str) -> None:
        out[f"{dst}.{hf_name}.weight"] = model.get(f"{src}/{ct2_name}/gamma")
        out[f"{dst}.{hf_name}.bias"] = model.get(f"{src}/{ct2_name}/beta")

    def linear(ct2_name: str, hf_name: str) -> None:
        out[f"{dst}.{hf_name}.weight"] = model.get(f"{src}/{ct2_name}/weight")
        out[f"{dst}.{hf_name}.bias"] = model.get(f"{src}/{ct2_name}/bias")

    # Self-attention: q, k, v stacked in linear_0; k has no bias in transformers
    # (CTranslate2 stores zeros there).
    q_w, k_w, v_w = _split_rows(model.get(f"{src}/self_attention/linear_0/weight"), 3)
    q_b, _k_b, v_b = _split_rows(model.get(f"{src}/self_attention/linear_0/bias"), 3)
    out.update(
        {
            f"{dst}.self_attn.q_proj.weight": q_w,
            f"{dst}.self_attn.q_proj.bias": q_b,
            f"{dst}.self_attn.k_proj.weight": k_w,
            f"{dst}.self_attn.v_proj.weight": v_w,
            f"{dst}.self_attn.v_proj.bias": v_b,
        }
    )
    linear("self_attention/linear_1", "self_attn.out_proj")
    norm("self_attention/layer_norm", "self_attn_layer_norm")
    if decoder:
        linear("attention/linear_0", "encoder_attn.q_proj")
        k_w, v_w = _split_rows(model.get(f"{src}/attention/linear_1/weight"), 2)
        _k_b, v_b = _split_rows(model.get(f"{src}/attention/linear_1/bias"), 2)
        out.update(
            {
                f"{dst}.encoder_attn.k_proj.weight": k_w,
                f"{dst}.encoder_attn.v_proj.weight": v_w,
                f"{dst}.encoder_attn.v_proj.bias": v_b,
            }
        )
        linear("attention/linear_2", "encoder_attn.out_proj")
        norm("attention/layer_norm", "encoder_attn_layer_norm")
    linear("ffn/linear_0", "fc1")
    linear("ffn/linear_1", "fc2")
    norm("ffn/layer_norm", "final_layer_norm")
    return out


def build_state_dict(model: Ct2Model, shape: WhisperShape) -> dict[str, np.ndarray]:
    """transformers' ``WhisperForConditionalGeneration`` names → float32 arrays."""
    sd: dict[str, np.ndarray] = {}
    for conv in ("conv1", "conv2"):
        sd[f"model.encoder.{conv}.weight"] = model.get(f"encoder/{conv}/weight")
        sd[f"model.encoder.{conv}.bias"] = model.get(f"encoder/{conv}/bias")
    sd["model.encoder.embed_positions.weight"] = model.get("encoder/position_encodings/encodings")
    sd["model.encoder.layer_norm.weight"] = model.get("encoder/layer_norm/gamma")
    sd["model.encoder.layer_norm.bias"] = model.get("encoder/layer_norm/beta")
    sd["model.decoder.embed_tokens.weight"] = model.get("decoder/embeddings/weight")
    sd["model.decoder.embed_positions.weight"] = model.get("decoder/position_encodings/encodings")
    sd["model.decoder.layer_norm.weight"] = model.get("decoder/layer_norm/gamma")
    sd["model.decoder.layer_norm.bias"] = model.get("decoder/layer_norm/beta")
    for i in range(shape.encoder_layers):
        sd.update(_layer_tensors(model, f"encoder/layer_{i}", f"model.encoder.layers.{i}", False))
    for i in range(shape.decoder_layers):
        sd.update(_layer_tensors(model, f"decoder/layer_{i}", f"model.decoder.layers.{i}", True))
    # fp16 → fp32 on CPU: transformers' CPU kernels are float32; the GPU path casts back.
    return {name: np.ascontiguousarray(array, dtype=np.float32) for name, array in sd.items()}


@dataclass(frozen=True)
class Vocabulary:
    """Token strings by id, as CTranslate2's ``vocabulary.txt`` lists them."""

    tokens: list[str]

    @classmethod
    def read(cls, path: Path) -> Vocabulary:
        # split on "\n" only: byte-level tokens may contain other line-break characters
        lines = path.read_text(encoding="utf-8").split("\n")
        return cls(lines[:-1] if lines and lines[-1] == "" else lines)

    def id_of(self, token: str) -> int:
        return self.tokens.index(token)

    @property
    def eot(self) -> int:
        return self.id_of("<|endoftext|>")

    @property
    def multilingual(self) -> bool:
        return len(self.tokens) >= 51865

    def specials(self) -> list[str]:
        """The ``<|...|>`` control tokens after end-of-text, timestamps excluded."""
        return [t for t in self.tokens[self.eot :] if not _is_timestamp(t)]

    def languages(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.tokens) if _LANGUAGE_TOKEN.match(t)}


def _is_timestamp(token: str) -> bool:
    return re.fullmatch(r"<\|\d+\.\d\d\|>", token) is not None


def timestamp_tokens() -> list[str]:
    """Whisper's timestamp tokens, <|0.00|> to <|30.00|>, in id order."""
    return [f"<|{i * 0.02:.2f}|>" for i in range(TIMESTAMP_COUNT)]


def build_tokenizer(source: Path, vocabulary: Vocabulary):
    """transformers' WhisperTokenizer with every id where ``vocabulary.txt`` has it.

    The packaged tokenizer.json lacks the 1501 timestamp tokens, its ``<|...|>``
    tokens are not registered as special with transformers, and it names no pad token
    (transformers' batched pipeline then refuses the model).
    """
    from tokenizers import AddedToken, Tokenizer
    from transformers import WhisperTokenizer

    backend = Tokenizer.from_file(str(source / "tokenizer.json"))
    if backend.get_vocab_size() + TIMESTAMP_COUNT != len(vocabulary.tokens):
        raise ValueError(
            f"tokenizer.json has {backend.get_vocab_size()} tokens; with {TIMESTAMP_COUNT} "
            f"timestamps that should make the {len(vocabulary.tokens)} of vocabulary.txt"
        )
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in timestamp_tokens()])
    tokenizer = WhisperTokenizer(
        tokenizer_object=backend,
        extra_special_tokens=[t for t in vocabulary.specials() if t != "<|endoftext|>"],
        pad_token="<|endoftext|>",  # as the hub's checkpoints: batched pipelines pad with it
    )
    mismatched = [
        i
        for i, token in enumerate(vocabulary.tokens)
        if tokenizer.convert_ids_to_tokens(i) != token
    ]
    if mismatched:
        raise ValueError(
            f"{len(mismatched)} token ids differ from vocabulary.txt, first at id {mismatched[0]}"
        )
    return tokenizer


def build_generation_config(ct2_config: dict, vocabulary: Vocabulary, max_length: int):
    """transformers' GenerationConfig for the imported model, from CTranslate2's config
    and the vocabulary's ids."""
    from transformers import GenerationConfig

    eot = vocabulary.eot
    fields = dict(
        decoder_start_token_id=vocabulary.id_of("<|startoftranscript|>"),
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        no_timestamps_token_id=vocabulary.id_of("<|notimestamps|>"),
        prev_sot_token_id=vocabulary.id_of("<|startofprev|>"),
        suppress_tokens=list(ct2_config["suppress_ids"]),
        begin_suppress_tokens=list(ct2_config["suppress_ids_begin"]),
        alignment_heads=[list(pair) for pair in ct2_config["alignment_heads"]],
        max_initial_timestamp_index=50,
        max_length=max_length,
        is_multilingual=vocabulary.multilingual,
    )
    if vocabulary.multilingual:
        fields["lang_to_id"] = vocabulary.languages()
        fields["task_to_id"] = {
            task: vocabulary.id_of(f"<|{task}|>") for task in ("transcribe", "translate")
        }
    return GenerationConfig(**fields)


def build_model_config(shape: WhisperShape, vocabulary: Vocabulary):
    """transformers' WhisperConfig of ``shape``, with the vocabulary's special ids."""
    from transformers import WhisperConfig

    eot = vocabulary.eot
    return WhisperConfig(
        vocab_size=shape.vocab_size,
        num_mel_bins=shape.n_mels,
        d_model=shape.d_model,
        encoder_layers=shape.encoder_layers,
        decoder_layers=shape.decoder_layers,
        encoder_attention_heads=shape.encoder_heads,
        decoder_attention_heads=shape.decoder_heads,
        encoder_ffn_dim=shape.encoder_ffn,
        decoder_ffn_dim=shape.decoder_ffn,
        max_source_positions=shape.max_source_positions,
        max_target_positions=shape.max_target_positions,
        decoder_start_token_id=vocabulary.id_of("<|startoftranscript|>"),
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        tie_word_embeddings=True,
    )


def import_whisper(source: Path, destination: Path) -> list[Path]:
    """Convert ``source`` (a CTranslate2 Whisper directory) into ``destination``.

    Returns the files written. ``destination`` must not hold another model.
    """
    import torch
    from safetensors.torch import save_file
    from transformers import WhisperFeatureExtractor

    ct2 = read_ct2_model(source / "model.bin")
    shape = infer_shape(ct2)
    vocabulary = Vocabulary.read(source / "vocabulary.txt")
    if len(vocabulary.tokens) != shape.vocab_size:
        raise ValueError(
            f"vocabulary.txt has {len(vocabulary.tokens)} tokens, the embeddings {shape.vocab_size}"
        )
    ct2_config = json.loads((source / "config.json").read_text())

    destination.mkdir(parents=True, exist_ok=True)
    state = {name: torch.from_numpy(array) for name, array in build_state_dict(ct2, shape).items()}
    save_file(state, str(destination / "model.safetensors"), metadata={"format": "pt"})
    build_model_config(shape, vocabulary).save_pretrained(destination)
    build_generation_config(ct2_config, vocabulary, shape.max_target_positions).save_pretrained(
        destination
    )
    build_tokenizer(source, vocabulary).save_pretrained(destination)
    WhisperFeatureExtractor(feature_size=shape.n_mels).save_pretrained(destination)
    return sorted(p for p in destination.iterdir() if p.is_file())
