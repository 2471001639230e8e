"""Loading an assistant (draft) model and checking that it can draft for the main model."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import (
    AutoConfig,
    AutoTokenizer,
    WhisperForCausalLM,
    WhisperForConditionalGeneration,
)

from parley.models.device import DevicePlan
from parley.models.encoder import encode


class IncompatibleAssistant(ValueError):
    """The assistant cannot draft for this main model."""


@dataclass
class Assistant:
    """A smaller Whisper that drafts for the main model (same tokenizer)."""

    label: str
    decoder: torch.nn.Module
    proj_out: torch.nn.Module
    encoder: torch.nn.Module | None  # None: reads the main model's encoder output
    languages: frozenset[str] | None  # None: used for every language

    @property
    def decoder_only(self) -> bool:
        return self.encoder is None

    def encode(self, features: torch.Tensor, main_hidden: torch.Tensor) -> torch.Tensor:
        """Its encoder's output over as many positions as the main model's encoded."""
        if self.encoder is None:
            return main_hidden
        return encode(self.encoder, features, main_hidden.shape[1])

    def share_encoder(self, main_encoder: torch.nn.Module) -> bool:
        """Read the main model's encoder output, not its own, when its encoder holds the
        same weights: distil-whisper keeps its teacher's encoder unchanged (distil-large-v3
        drafting for large-v3), so its own pass would compute the same output again, and
        its weights would hold the same memory twice. Whether it reads the main's now."""
        if self.encoder is not None and same_weights(self.encoder, main_encoder):
            self.encoder = None
        return self.encoder is None

    def serves(self, language: str | None) -> bool:
        return self.languages is None or (language is not None and language in self.languages)


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    """Whether two modules hold the same tensors under the same names."""
    first, second = a.state_dict(), b.state_dict()
    return first.keys() == second.keys() and all(
        first[k].shape == second[k].shape
        and first[k].dtype == second[k].dtype
        and first[k].device == second[k].device
        and torch.equal(first[k], second[k])
        for k in first
    )


def check_compatible(main_config, main_tokenizer, assistant_config, assistant_tokenizer) -> None:
    """Raise IncompatibleAssistant with the reason, or return quietly."""
    if assistant_config.vocab_size != main_config.vocab_size:
        raise IncompatibleAssistant(
            f"vocabularies differ ({assistant_config.vocab_size} vs {main_config.vocab_size} "
            "tokens): drafts would be other tokens"
        )
    if (
        assistant_tokenizer is not None
        and main_tokenizer is not None
        and assistant_tokenizer.get_vocab() != main_tokenizer.get_vocab()
    ):
        raise IncompatibleAssistant("the tokenizers map tokens to different ids")
    decoder_only = "WhisperForCausalLM" in (assistant_config.architectures or [])
    if decoder_only:
        if assistant_config.d_model != main_config.d_model:
            raise IncompatibleAssistant(
                f"a decoder-only assistant reads the main encoder's output: its width "
                f"{assistant_config.d_model} must equal the main model's {main_config.d_model}"
            )
        if assistant_config.max_source_positions != main_config.max_source_positions:
            raise IncompatibleAssistant("the encoder lengths differ")
    elif assistant_config.num_mel_bins != main_config.num_mel_bins:
        raise IncompatibleAssistant(
            f"the assistant reads {assistant_config.num_mel_bins} mel bins, the main model "
            f"{main_config.num_mel_bins}"
        )


def load_assistant(
    source: str,
    label: str,
    main_config,
    main_tokenizer,
    plan: DevicePlan,
    languages: frozenset[str] | None,
) -> Assistant:
    """Check that ``source`` can draft for the main model (before loading any weights),
    then load it; raises IncompatibleAssistant with the reason."""
    config = AutoConfig.from_pretrained(source)
    if getattr(config, "model_type", None) != "whisper":
        raise IncompatibleAssistant(f"{label} is not a Whisper model ({config.model_type})")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError):
        tokenizer = None  # a checkpoint without tokenizer files: the vocabulary size must do
    check_compatible(main_config, main_tokenizer, config, tokenizer)
    if "WhisperForCausalLM" in (config.architectures or []):
        model = WhisperForCausalLM.from_pretrained(
            source, dtype=plan.dtype, attn_implementation="sdpa"
        )
        model = plan.place(model)
        return Assistant(label, model.model.decoder, model.proj_out, None, languages)
    model = WhisperForConditionalGeneration.from_pretrained(
        source, dtype=plan.dtype, attn_implementation="sdpa"
    )
    model = plan.place(model)
    return Assistant(label, model.model.decoder, model.proj_out, model.model.encoder, languages)
