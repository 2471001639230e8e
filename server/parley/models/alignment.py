"""Word timings from Whisper's cross-attention alignment heads (DTW, as openai/whisper does).

The decode runs with SDPA attention, which returns no weights; once a final is
decoded, its row reads its own tokens once more and reports the alignment heads'
cross-attention (``RowDecoder.cross_attention``). This module turns those weights
into token start and end times, the way openai/whisper's ``find_alignment`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from parley.core.dtw import dynamic_time_warping
from parley.core.words import TimedWord, group_words, merge_partial_characters
from parley.models.greedy import RowDecode
from parley.models.median_filter import median_filter
from parley.models.row_decoder import RowDecoder

SECONDS_PER_ENCODER_FRAME = 0.02
MEDIAN_FILTER_WIDTH = 7


def token_times(
    weights: torch.Tensor, prompt_length: int, text_tokens: int, audio_seconds: float
) -> tuple[np.ndarray, np.ndarray]:
    """Start and end seconds (from the audio start) of each text token.

    ``weights``: the alignment heads' cross-attention over the prompt (at least one
    token), the text tokens and end-of-text, shape (heads, prompt_length + text_tokens +
    1, frames).
    """
    n = text_tokens
    if n == 0:
        return np.zeros(0), np.zeros(0)
    frames = max(1, min(int(round(audio_seconds / SECONDS_PER_ENCODER_FRAME)), weights.shape[-1]))
    weights = weights[..., :frames].float()
    std, mean = torch.std_mean(weights, dim=-2, keepdim=True)
    weights = median_filter((weights - mean) / (std + 1e-10), MEDIAN_FILTER_WIDTH)
    # A row's cross-attention is where the decoder looked to choose the *next* token, so
    # a token is placed by the row before it: the prompt's last token's row places the
    # first text token, and the last text token's row places end-of-text (openai/whisper's
    # ``find_alignment``, and transformers', slice the same rows). The token's own row
    # read the audio after it: every word came about one word late.
    matrix = weights.mean(dim=0)[prompt_length - 1 : prompt_length + n]
    text_index, time_index = dynamic_time_warping(-matrix.double().cpu().numpy())
    jumps = np.pad(np.diff(text_index), (1, 0), constant_values=1).astype(bool)
    jump_times = time_index[jumps] * SECONDS_PER_ENCODER_FRAME
    # DTW visits every row, so there is one jump per row: one for each text token, then
    # one for end-of-text; a token lasts from its jump to the next.
    return jump_times[:n], jump_times[1 : n + 1]


def word_timings(
    decoder: RowDecoder,
    decode: RowDecode,
    heads: Sequence[tuple[int, int]],
    eot: int,
    token_text: Callable[[int], str],
    seconds: float,
) -> tuple[TimedWord, ...]:
    """A finished decode's words over its ``seconds`` of audio: each with its start, end
    and probability."""
    tokens, prompt = decode.tokens, decode.prompt
    sequence = prompt + tokens + [eot]
    if len(sequence) > decoder.max_positions:
        return ()  # a decode that filled the decoder (a repetition loop): no timings
    weights = decoder.cross_attention(decode.row, sequence, heads)
    token_starts, token_ends = token_times(weights, len(prompt), len(tokens), seconds)
    pieces, starts, ends, probs = merge_partial_characters(
        [token_text(t) for t in tokens],
        token_starts.tolist(),
        token_ends.tolist(),
        np.exp(decode.token_logprobs).tolist(),
    )
    return tuple(group_words(pieces, starts, ends, probs))
