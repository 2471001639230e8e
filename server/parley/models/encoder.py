"""Whisper's encoder over the audio a clip has, not always a full 30 s window.

Whisper's encoder reads 30 s (1,500 positions); a live segment is a few seconds, so most
of a full pass encodes padding. ``encode`` runs transformers' own encoder modules over
the first ``frames`` positions only (the clip and a margin of padding after it), as
whisper.cpp's ``audio_ctx`` does, which costs about that share of a full pass. Partials
take such windows; finals and recordings' windows only with ``asr.short_final_windows``
(Whisper never trained on them, and some clips read worse: bench/README.md).

Whisper learnt to end a transcript where the padding begins. With less padding after
the speech it sometimes does not, and repeats itself: a decode over a short window is
bounded in tokens by its audio, and one that ran past that bound or repeated itself is
decoded again over a wider window, then the full one (``core.attempts.second_attempt``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from parley.core.asr import AsrRequest
from parley.core.audio import SAMPLE_RATE

FRAMES_PER_SECOND = 50  # encoder positions per second of audio (two mel frames each)
SAMPLES_PER_POSITION = SAMPLE_RATE // FRAMES_PER_SECOND
# A short window's decode ends by this many tokens (ten a second of its audio, and a few
# for punctuation), well past fast speech's five or six a second: past it, it repeats.
TOKENS_PER_SECOND_BOUND = 10
TOKENS_BOUND_BASE = 12


# Short windows come in whole seconds of positions. Every distinct length of pass has
# oneDNN build kernels of its own, which it caches (up to 1,024) with their scratch
# memory: a stream's partials, each a little longer than the last, grew a server by
# 500 MB in 12 minutes of audio and an engine by 1.2 GB in 300 clips of random length
# (bench/VARIANTS.md, "Windows in whole seconds"). In whole seconds there are at most
# 30 lengths, built once and reused, which is also faster than building new ones.
WINDOW_STEP_FRAMES = FRAMES_PER_SECOND


def window_frames(seconds: float, margin_s: float | None, full: int) -> int:
    """Encoder positions for ``seconds`` of audio and at least ``margin_s`` of padding
    after it, in whole ``WINDOW_STEP_FRAMES``, at most ``full``; ``full`` when there is no
    margin (None: always the whole window)."""
    if margin_s is None:
        return full
    wanted = math.ceil((seconds + margin_s) * FRAMES_PER_SECOND)
    return min(full, math.ceil(wanted / WINDOW_STEP_FRAMES) * WINDOW_STEP_FRAMES)


def pass_frames(requests: Sequence[AsrRequest], margin_s: float | None, full: int) -> int:
    """Encoder positions one pass over ``requests`` reads: as many as the longest needs
    (each request's padding the engine's ``margin_s``, or its own where that is wider)."""
    return max(
        full
        if r.whole_window or margin_s is None
        else window_frames(r.seconds, max(margin_s, r.margin_s), full)
        for r in requests
    )


def token_bound(seconds: float) -> int:
    """The most tokens a decode over a short window of ``seconds`` of audio may write."""
    return TOKENS_BOUND_BASE + math.ceil(TOKENS_PER_SECOND_BOUND * seconds)


def encode(encoder: torch.nn.Module, features: torch.Tensor, frames: int) -> torch.Tensor:
    """The encoder's output for the first ``frames`` positions of ``features`` (clips,
    mel bins, 3000 mel frames): shape (clips, frames, d_model). The whole window goes
    through transformers' own forward; a shorter one through the same modules in the
    same order (its forward refuses any length but the full one)."""
    if frames >= encoder.config.max_source_positions:
        return encoder(features).last_hidden_state
    return encoder_layers(encoder, features, frames)


def encoder_layers(encoder: torch.nn.Module, features: torch.Tensor, frames: int) -> torch.Tensor:
    """``encode``'s short path, at any length (over the whole window it equals the forward).
    It computes in the encoder's own precision and answers in the features' (a bfloat16
    encoder on a float32 plan, ``models/device.py``, does the same around its forward)."""
    x = F.gelu(encoder.conv1(features[..., : 2 * frames].to(encoder.conv1.weight.dtype)))
    x = F.gelu(encoder.conv2(x)).permute(0, 2, 1)
    hidden = x + encoder.embed_positions.weight[:frames]
    for layer in encoder.layers:
        hidden = layer(hidden, None)
    return encoder.layer_norm(hidden).to(features.dtype)
