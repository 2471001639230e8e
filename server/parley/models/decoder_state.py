"""One decode's view of a Whisper decoder: feed tokens, get hidden states, roll back.

Speculative decoding needs exactly two cache operations: append tokens (the last
choice plus a draft, in one pass) and forget the rejected ones. Both decoders here
offer them; ``GreedyVerifier`` and ``AssistantDrafter`` do not care which they get.

- ``DynamicDecoder``: transformers' own decoder with its growing ``DynamicCache``;
  rolling back crops the cache. Any shape, no set-up; per-step overhead is high on GPU.
- ``StaticDecoder`` (``parley.models.static_decoder``): preallocated key/value buffers,
  rolling back moves the write position; on CUDA every pass replays a captured graph.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache


class DecoderState(Protocol):
    """The decoder's cache for one sequence, ``length`` tokens long."""

    length: int

    def feed(self, ids: Sequence[int]) -> torch.Tensor:
        """Append ``ids``; the final hidden state of each, shape (len(ids), d_model).

        Hidden states, not logits: the caller projects only the rows it needs (a long
        context prompt needs none).
        """
        ...

    def truncate(self, length: int) -> None:
        """Forget every token after the first ``length``."""
        ...


class Decoder(Protocol):
    """Makes one ``DecoderState`` per decode, over one encoder output (batch size one)."""

    def begin(self, encoder_hidden: torch.Tensor) -> DecoderState: ...


class OutputHead:
    """Final hidden states to float32 logits through the output projection.

    On CPU, projecting one or a few rows is a matrix-vector product over the whole
    vocabulary (80 MB of float32 for tiny.en), bound by memory reads. Stored
    transposed, the same product ran 2.4 times faster on this project's 2-core
    machine (4.7 against 11.2 ms for tiny.en), at the cost of one copy of the matrix.
    GPUs read either layout at full speed and keep transformers' module.
    """

    def __init__(self, proj_out: torch.nn.Module):
        self._proj_out = proj_out
        self._transposed = None
        if proj_out.weight.device.type == "cpu" and proj_out.bias is None:
            with torch.no_grad():
                self._transposed = proj_out.weight.t().contiguous()

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        if self._transposed is not None:
            return (hidden @ self._transposed).float()
        return self._proj_out(hidden).float()


class DynamicDecoder:
    def __init__(self, decoder: torch.nn.Module):
        self._decoder = decoder

    def begin(self, encoder_hidden: torch.Tensor) -> "DynamicDecoderState":
        return DynamicDecoderState(self._decoder, encoder_hidden)


class DynamicDecoderState:
    def __init__(self, decoder, encoder_hidden: torch.Tensor):
        self._decoder = decoder
        self._encoder_hidden = encoder_hidden
        self._cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        self.length = 0

    def feed(self, ids: Sequence[int]) -> torch.Tensor:
        out = self._decoder(input_ids=torch.tensor([list(ids)], device=self._encoder_hidden.device),
                            encoder_hidden_states=self._encoder_hidden, cache=self._cache,
                            use_cache=True)
        self.length += len(ids)
        return out.last_hidden_state[0]

    def truncate(self, length: int) -> None:
        if length < self.length:
            self._cache.crop(length - self.length)  # transformers 5 crops by a negative count
            self.length = length
