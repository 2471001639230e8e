"""Word timings from Whisper's cross-attention alignment heads (DTW over one forced pass).

The decode itself runs with SDPA attention, which returns no weights; this module
runs one teacher-forced decoder pass with eager attention over the tokens already
chosen, as openai/whisper's ``find_alignment`` does.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
# Pinned transformers: its own DTW and median filter, the ones its Whisper generate uses.
from transformers.models.whisper.generation_whisper import _dynamic_time_warping, _median_filter

SECONDS_PER_ENCODER_FRAME = 0.02
MEDIAN_FILTER_WIDTH = 7


@dataclass(frozen=True)
class ForcedPass:
    """What one teacher-forced pass says about each text token."""

    starts: np.ndarray        # seconds, relative to the audio start
    ends: np.ndarray
    probabilities: np.ndarray  # the model's probability of each chosen token


@contextmanager
def _eager_attention(model):
    # Attention weights exist only in the eager implementation; switching the config
    # flag is how transformers itself does it. Only the model's own thread calls this.
    config = model.config
    previous = config._attn_implementation
    config._attn_implementation = "eager"
    try:
        yield
    finally:
        config._attn_implementation = previous


@torch.inference_mode()
def forced_pass(model, encoder_hidden, prompt: list[int], text_tokens: list[int], eot: int,
                audio_seconds: float) -> ForcedPass:
    """Token start/end times and probabilities for ``text_tokens`` after ``prompt``."""
    n = len(text_tokens)
    if n == 0:
        empty = np.zeros(0)
        return ForcedPass(empty, empty, empty)
    ids = torch.tensor([prompt + text_tokens + [eot]], device=encoder_hidden.device)
    with _eager_attention(model):
        out = model.model.decoder(input_ids=ids, encoder_hidden_states=encoder_hidden,
                                  output_attentions=True, use_cache=False)
    logits = model.proj_out(out.last_hidden_state)[0].float()
    # Position i predicts token i + 1: the text tokens and end-of-text.
    predictions = logits[len(prompt) - 1: len(prompt) - 1 + n].softmax(-1)
    probabilities = predictions[torch.arange(n), ids[0, len(prompt): len(prompt) + n]]

    frames = max(1, min(int(round(audio_seconds / SECONDS_PER_ENCODER_FRAME)),
                        encoder_hidden.shape[1]))
    heads = model.generation_config.alignment_heads
    weights = torch.stack([out.cross_attentions[layer][0, head, :, :frames]
                           for layer, head in heads]).float()
    std, mean = torch.std_mean(weights, dim=-2, keepdim=True)
    weights = _median_filter((weights - mean) / (std + 1e-10), MEDIAN_FILTER_WIDTH)
    matrix = weights.mean(dim=0)[len(prompt): len(prompt) + n + 1]
    text_index, time_index = _dynamic_time_warping(-matrix.double().cpu().numpy())
    jumps = np.pad(np.diff(text_index), (1, 0), constant_values=1).astype(bool)
    jump_times = time_index[jumps] * SECONDS_PER_ENCODER_FRAME
    # DTW visits every row, so there is one jump per row: n text tokens, then end-of-text.
    starts, ends = jump_times[:n], jump_times[1:n + 1]
    return ForcedPass(starts, ends, probabilities.cpu().numpy())
