"""Whisper's decoder over preallocated key/value buffers, replayed as CUDA graphs on GPU.

On a GPU a decoding step costs kernel launches and Python, not arithmetic (README,
"Decoder cache"): fixed-address caches and captured graphs are the lever.
transformers' ``StaticCache`` cannot serve speculative decoding (it refuses assisted
generation and cannot be cropped), so the cache handling here is ours while the
layers' weights and modules (projections, layer norms, MLP) stay transformers':

- the self-attention keys and values of position p live at slot p of fixed buffers;
  a pass writes its tokens at their positions and each token attends to the slots at
  or before its own position. Tokens after a rollback point are never read again
  until overwritten, so rolling back is setting ``length``: free, and address-stable;
- cross-attention keys and values are projected once per decode into buffers of
  their own;
- on CUDA, one graph per pass width in ``WIDTHS`` is captured at load time. A pass
  of n tokens replays the smallest width ≥ n; the padding slots' keys land after the
  sequence, where nothing reads them before they are overwritten. Buffers are sized
  once, so memory stays flat however long a session runs.

Without graphs (CPU) the same forward runs eagerly at the exact width and attends
only to the filled slots.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F

WIDTHS = (1, 2, 4, 8, 16, 32, 64)


@dataclass
class _Captured:
    graph: "torch.cuda.CUDAGraph"
    ids: torch.Tensor        # (1, width) long, read by the graph
    positions: torch.Tensor  # (width,) long, read by the graph
    hidden: torch.Tensor     # (1, width, d_model), written by the graph


class StaticDecoder:
    """One decoder's fixed buffers; serves one decode at a time (one thread owns it)."""

    def __init__(self, decoder: torch.nn.Module, *, graphs: bool = False, max_width: int = 16):
        weight = decoder.embed_tokens.weight
        self._decoder = decoder
        self._device, dtype = weight.device, weight.dtype
        attention = decoder.layers[0].self_attn
        self._heads, self._head_dim = attention.num_heads, attention.head_dim
        self._d_model = weight.shape[1]
        self.max_positions = decoder.embed_positions.weight.shape[0]
        self.max_width = max_width
        self._slots = self.max_positions + max_width  # room for a padded pass at the end
        layers = len(decoder.layers)
        frames = decoder.max_source_positions
        shape = (layers, 1, self._heads, self._slots, self._head_dim)
        self._self_k = torch.zeros(shape, device=self._device, dtype=dtype)
        self._self_v = torch.zeros(shape, device=self._device, dtype=dtype)
        cross = (layers, 1, self._heads, frames, self._head_dim)
        self._cross_k = torch.zeros(cross, device=self._device, dtype=dtype)
        self._cross_v = torch.zeros(cross, device=self._device, dtype=dtype)
        self._slot_index = torch.arange(self._slots, device=self._device)
        self._graphs: dict[int, _Captured] = {}
        self._owner = 0  # which decode the buffers belong to
        if graphs:
            self._capture([w for w in WIDTHS if w < max_width] + [max_width])

    @property
    def graphed(self) -> bool:
        return bool(self._graphs)

    @torch.inference_mode()
    def begin(self, encoder_hidden: torch.Tensor) -> "StaticDecoderState":
        if encoder_hidden.shape[0] != 1:
            raise ValueError("the static decoder decodes one sequence at a time")
        for i, layer in enumerate(self._decoder.layers):
            attention = layer.encoder_attn
            self._cross_k[i].copy_(self._split_heads(attention.k_proj(encoder_hidden)))
            self._cross_v[i].copy_(self._split_heads(attention.v_proj(encoder_hidden)))
        self._owner += 1
        return StaticDecoderState(self, self._owner)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(1, x.shape[1], self._heads, self._head_dim).transpose(1, 2)

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, visible: int) -> torch.Tensor:
        """Hidden states of ``ids`` at ``positions``, attending to slots ``[0, visible)``.

        Pure tensor work with no data-dependent Python, so it can be captured as a graph.
        The arithmetic follows transformers' Whisper decoder layer (query scaled before
        the attention, attention scale 1.0) so the choices match its own forward.
        """
        decoder, width = self._decoder, ids.shape[1]
        embedded = decoder.embed_positions.weight[positions.clamp(max=self.max_positions - 1)]
        x = decoder.embed_tokens(ids) + embedded
        mask = self._slot_index[None, :visible] <= positions[:, None]
        for i, layer in enumerate(decoder.layers):
            attention = layer.self_attn
            h = layer.self_attn_layer_norm(x)
            q = self._split_heads(attention.q_proj(h) * attention.scaling)
            self._self_k[i].index_copy_(2, positions, self._split_heads(attention.k_proj(h)))
            self._self_v[i].index_copy_(2, positions, self._split_heads(attention.v_proj(h)))
            out = F.scaled_dot_product_attention(
                q, self._self_k[i][:, :, :visible], self._self_v[i][:, :, :visible],
                attn_mask=mask, scale=1.0)
            x = x + attention.out_proj(out.transpose(1, 2).reshape(1, width, self._d_model))
            attention = layer.encoder_attn
            h = layer.encoder_attn_layer_norm(x)
            q = self._split_heads(attention.q_proj(h) * attention.scaling)
            out = F.scaled_dot_product_attention(q, self._cross_k[i], self._cross_v[i], scale=1.0)
            x = x + attention.out_proj(out.transpose(1, 2).reshape(1, width, self._d_model))
            h = layer.final_layer_norm(x)
            x = x + layer.fc2(layer.activation_fn(layer.fc1(h)))
        return decoder.layer_norm(x)

    @torch.inference_mode()
    def _capture(self, widths) -> None:
        pool = None
        side = torch.cuda.Stream(self._device)
        for width in widths:
            ids = torch.zeros((1, width), dtype=torch.long, device=self._device)
            # Warm-up and capture write into the spare slots past the last position.
            positions = torch.arange(self._slots - width, self._slots, device=self._device)
            side.wait_stream(torch.cuda.current_stream(self._device))
            with torch.cuda.stream(side):
                for _ in range(2):  # cuBLAS workspaces and lazy kernels before capture
                    self._forward(ids, positions, self._slots)
            torch.cuda.current_stream(self._device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                hidden = self._forward(ids, positions, self._slots)
            pool = graph.pool()  # widths share one memory pool: only one replays at a time
            self._graphs[width] = _Captured(graph, ids, positions, hidden)

    def _run(self, ids: Sequence[int], start: int) -> torch.Tensor:
        count = len(ids)
        if not self._graphs:
            positions = torch.arange(start, start + count, device=self._device)
            tokens = torch.tensor([list(ids)], device=self._device)
            return self._forward(tokens, positions, start + count)[0]
        width = next(w for w in self._graphs if w >= count)
        captured = self._graphs[width]
        padded = list(ids) + [ids[-1]] * (width - count)
        captured.ids.copy_(torch.tensor([padded]), non_blocking=True)
        captured.positions.copy_(torch.arange(start, start + width), non_blocking=True)
        captured.graph.replay()
        return captured.hidden[0, :count].clone()  # the next replay overwrites the output


class StaticDecoderState:
    def __init__(self, decoder: StaticDecoder, owner: int):
        self._decoder = decoder
        self._owner = owner
        self.length = 0

    @torch.inference_mode()
    def feed(self, ids: Sequence[int]) -> torch.Tensor:
        decoder = self._decoder
        if decoder._owner != self._owner:
            raise RuntimeError("the static decoder's buffers now belong to a later decode")
        if self.length + len(ids) > decoder.max_positions:
            raise ValueError(f"{self.length + len(ids)} tokens: the decoder holds at most "
                             f"{decoder.max_positions}")
        pieces = []
        for at in range(0, len(ids), decoder.max_width):
            piece = ids[at:at + decoder.max_width]
            pieces.append(decoder._run(piece, self.length))
            self.length += len(piece)
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces)

    def truncate(self, length: int) -> None:
        self.length = min(self.length, length)
