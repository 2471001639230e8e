"""Whisper's decoder over fixed key/value buffers, one row per decode in flight.

A step costs kernel launches and Python on a GPU, reading the weights on a CPU: either
way the lever is to advance many decodes in one pass, and to make each pass cheap:

- every decode owns a *row* of preallocated buffers: self-attention keys and values
  by position, and its cross-attention keys and values (as many encoder positions as
  its window has), projected once when it joins. Rows in flight are kept packed at the
  front (a leaving row's place is taken by the last one), so a pass reads views;
- a pass feeds each row its own tokens at its own positions, in one batched forward
  (shorter feeds are padded after the row's sequence, where nothing reads them before
  they are overwritten). A token attends to its row's slots up to its position, so
  rolling back rejected draft tokens is setting the row's ``length``;
- on CUDA, one graph per (rows, width) bucket is captured at load time and replayed.

The layers' modules are transformers'; the cache handling and the attention calls are
ours: transformers' caches can neither be rolled back per row nor keep rows packed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

WIDTH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    ids: torch.Tensor  # (rows, width) long, read by the graph
    positions: torch.Tensor  # (rows, width) long, read by the graph
    hidden: torch.Tensor  # (rows, width, d_model), written by the graph


class Row:
    """One decode's row: feeds tokens at its own positions, rolls back by length.

    It is a ``drafters.DecoderState``, so an assistant drafter can own one too.
    """

    def __init__(self, decoder: RowDecoder, slot: int):
        self.decoder = decoder  # whose buffers hold it (several rows' passes go through it)
        self.slot = slot  # where its buffers are; moves when rows are packed
        self.length = 0

    @property
    def active(self) -> bool:
        return self.slot >= 0

    def feed(self, ids: Sequence[int]) -> torch.Tensor:
        """Append ``ids``; their final hidden states, shape (len(ids), d_model)."""
        return self.decoder.forward([self], [ids])[0]

    def truncate(self, length: int) -> None:
        """Forget every token after the first ``length``."""
        self.length = min(self.length, length)


class RowDecoder:
    """One decoder's buffers for up to ``capacity`` rows (one thread owns it)."""

    def __init__(
        self, decoder: torch.nn.Module, *, capacity: int, max_width: int, graphs: bool = False
    ):
        weight = decoder.embed_tokens.weight
        self._decoder = decoder
        self._device, dtype = weight.device, weight.dtype
        attention = decoder.layers[0].self_attn
        self._heads, self._head_dim = attention.num_heads, attention.head_dim
        self._d_model = weight.shape[1]
        self.capacity = capacity
        self.max_positions = decoder.embed_positions.weight.shape[0]
        self.max_width = max_width
        self._slots = self.max_positions + max_width  # room for a padded pass at the end
        layers, frames = len(decoder.layers), decoder.max_source_positions
        shape = (layers, capacity, self._heads, self._slots, self._head_dim)
        self._self_k = torch.zeros(shape, device=self._device, dtype=dtype)
        self._self_v = torch.zeros(shape, device=self._device, dtype=dtype)
        self.frames = frames  # a whole window's encoder positions
        self._frames = [frames] * capacity  # each slot's: a short window's row reads its own
        self._frame_index = torch.arange(frames, device=self._device)
        cross = (layers, capacity, self._heads, frames, self._head_dim)
        self._cross_k = torch.zeros(cross, device=self._device, dtype=dtype)
        self._cross_v = torch.zeros(cross, device=self._device, dtype=dtype)
        self._buffers = (self._self_k, self._self_v, self._cross_k, self._cross_v)
        self._slot_index = torch.arange(self._slots, device=self._device)
        self._row_index = torch.arange(capacity, device=self._device)
        self._head_index = torch.arange(self._heads, device=self._device)
        self._rows: list[Row] = []  # in flight; row i lives at slot i
        self._graphs: dict[tuple[int, int], _Captured] = {}
        if graphs:
            self._capture()

    @property
    def in_flight(self) -> int:
        return len(self._rows)

    # ------------------------------------------------------------------ rows

    @torch.inference_mode()
    def add(self, encoder_hidden: torch.Tensor) -> list[Row]:
        """New rows over ``encoder_hidden`` (clips, frames, d_model); raises when full."""
        count, first = encoder_hidden.shape[0], len(self._rows)
        if first + count > self.capacity:
            raise RuntimeError(f"the decoder holds {self.capacity} rows; {first} are in use")
        frames = encoder_hidden.shape[1]
        if frames < self.frames and self._graphs:
            raise ValueError("a decoder replaying graphs reads whole 30 s windows only")
        for i, layer in enumerate(self._decoder.layers):
            attention = layer.encoder_attn
            self._cross_k[i, first : first + count, :, :frames].copy_(
                self._split_heads(attention.k_proj(encoder_hidden))
            )
            self._cross_v[i, first : first + count, :, :frames].copy_(
                self._split_heads(attention.v_proj(encoder_hidden))
            )
        self._frames[first : first + count] = [frames] * count
        rows = [Row(self, first + i) for i in range(count)]
        self._rows.extend(rows)
        return rows

    @torch.inference_mode()
    def arrange(self, rows: Sequence[Row]) -> None:
        """Move ``rows`` into the first ``len(rows)`` slots (swapping others out), so that
        one pass can read them as a slice while the rest of the batch waits."""
        wanted = set(map(id, rows))
        outside = [r for r in rows if r.slot >= len(rows)]
        inside_others = [r for r in self._rows[: len(rows)] if id(r) not in wanted]
        for row, other in zip(outside, inside_others):
            self._swap(row, other)

    def _swap(self, a: Row, b: Row) -> None:
        used = min(max(a.length, b.length) + self.max_width, self._slots)
        frames = max(self._frames[a.slot], self._frames[b.slot])
        for buffers, length in zip(self._buffers, (used, used, frames, frames)):
            first, second = buffers[:, a.slot, :, :length], buffers[:, b.slot, :, :length]
            kept = first.clone()
            first.copy_(second)
            second.copy_(kept)
        self._frames[a.slot], self._frames[b.slot] = self._frames[b.slot], self._frames[a.slot]
        a.slot, b.slot = b.slot, a.slot
        self._rows[a.slot], self._rows[b.slot] = a, b

    @torch.inference_mode()
    def release(self, row: Row) -> None:
        """Free ``row``'s buffers; the last row moves into its place (rows stay packed)."""
        if not row.active:
            return
        slot, last = row.slot, self._rows[-1]
        if last is not row:
            used = min(last.length + self.max_width, self._slots)
            frames = self._frames[slot] = self._frames[last.slot]
            for buffers, length in zip(self._buffers, (used, used, frames, frames)):
                buffers[:, slot, :, :length].copy_(buffers[:, last.slot, :, :length])
            last.slot = slot
            self._rows[slot] = last
        self._rows.pop()
        row.slot = -1

    # ------------------------------------------------------------------ passes

    @torch.inference_mode()
    def forward(self, rows: Sequence[Row], feeds: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Feed ``feeds[i]`` to ``rows[i]``, all in one pass where they are packed together;
        the final hidden states of each feed, shape (len(feeds[i]), d_model)."""
        for row, ids in zip(rows, feeds):
            if not row.active:
                raise RuntimeError("this row was released; its decode has ended")
            if not ids:
                raise ValueError("a pass feeds each row at least one token")
            if row.length + len(ids) > self.max_positions:
                raise ValueError(
                    f"{row.length + len(ids)} tokens: the decoder holds at most "
                    f"{self.max_positions}"
                )
        width = max(len(ids) for ids in feeds)
        if len(rows) > 1 and max(r.length for r in rows) + width > self._slots:
            # A padded pass would run past the buffers (a long prompt beside a long
            # sequence): one row at a time instead.
            return [self.forward([row], [ids])[0] for row, ids in zip(rows, feeds)]
        slots = sorted(r.slot for r in rows)
        # A pass reads its rows as one slice; captured graphs read it from the first
        # slot only (a row drafting alone from the second ran eagerly).
        first = 0 if self._graphs else slots[0]
        if slots != list(range(first, first + len(slots))):
            self.arrange(rows)
        order = sorted(range(len(rows)), key=lambda i: rows[i].slot)
        hidden = self._run([rows[i] for i in order], [feeds[i] for i in order], width)
        out: list[torch.Tensor] = [hidden] * len(rows)
        for k, i in enumerate(order):
            out[i] = hidden[k, : len(feeds[i])]
            rows[i].length += len(feeds[i])
        return out

    def _run(self, rows: list[Row], feeds: list[Sequence[int]], width: int) -> torch.Tensor:
        first, count = rows[0].slot, len(rows)
        bucket = self._bucket(first, count, width)
        if bucket is None:
            ids = torch.tensor(
                [list(f) + [f[-1]] * (width - len(f)) for f in feeds], device=self._device
            )
            starts = torch.tensor([r.length for r in rows], device=self._device)
            positions = starts[:, None] + torch.arange(width, device=self._device)
            visible = max(r.length for r in rows) + width
            return self._forward(ids, positions, first, count, visible, self._cross_mask(rows))[0]
        captured = self._graphs[bucket]
        bucket_rows, bucket_width = bucket
        ids = [list(f) + [f[-1]] * (bucket_width - len(f)) for f in feeds]
        positions = [list(range(r.length, r.length + bucket_width)) for r in rows]
        spare = list(range(self._slots - bucket_width, self._slots))
        ids += [[0] * bucket_width] * (bucket_rows - count)  # padding rows write only into
        positions += [spare] * (bucket_rows - count)  # slots past every sequence
        captured.ids.copy_(torch.tensor(ids), non_blocking=True)
        captured.positions.copy_(torch.tensor(positions), non_blocking=True)
        captured.graph.replay()
        return captured.hidden[:count].clone()  # the next replay overwrites the output

    def _bucket(self, first: int, count: int, width: int) -> tuple[int, int] | None:
        if not self._graphs or first != 0:
            return None
        fits = [key for key in self._graphs if key[0] >= count and key[1] >= width]
        return min(fits, default=None)

    def _cross_mask(self, rows: Sequence[Row]) -> tuple[int, torch.Tensor | None]:
        """Encoder positions a pass over ``rows`` reads, and each row's (None: all)."""
        frames = [self._frames[r.slot] for r in rows]
        widest = max(frames)
        if min(frames) == widest:
            return widest, None
        have = torch.tensor(frames, device=self._device)
        return widest, (self._frame_index[:widest] < have[:, None])[:, None, None]

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], self._heads, self._head_dim).transpose(1, 2)

    def _forward(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        first: int,
        count: int,
        visible: int,
        cross: tuple[int, torch.Tensor | None] | None = None,
        heads: dict[int, list[int]] | None = None,
    ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """Hidden states of ``ids`` (rows, width) at ``positions`` for rows
        ``[first, first + count)``, each attending to its own slots ``[0, visible)`` and
        to ``cross``'s encoder positions (``_cross_mask``; None: all of them); and, for
        ``heads`` ({layer: [head, ...]}), those heads' cross-attention weights.

        Without ``heads`` it is pure tensor work with no data-dependent Python, so it can
        be captured as a graph. The arithmetic follows transformers' Whisper decoder layer
        (query scaled before the attention, attention scale 1.0) so the choices match its
        own forward.
        """
        decoder, width = self._decoder, ids.shape[1]
        embedded = decoder.embed_positions.weight[positions.clamp(max=self.max_positions - 1)]
        x = decoder.embed_tokens(ids) + embedded
        mask = (self._slot_index[:visible] <= positions[:, :, None])[:, None]
        where = (
            self._row_index[:count, None, None],
            self._head_index[None, :, None],
            positions[:, None, :],
        )
        last = first + count
        frames, cross_mask = cross if cross is not None else (self.frames, None)
        weights: dict[int, torch.Tensor] = {}
        for i, layer in enumerate(decoder.layers):
            attention = layer.self_attn
            h = layer.self_attn_layer_norm(x)
            q = self._split_heads(attention.q_proj(h) * attention.scaling)
            keys, values = self._self_k[i, first:last], self._self_v[i, first:last]
            keys.index_put_(where, self._split_heads(attention.k_proj(h)))
            values.index_put_(where, self._split_heads(attention.v_proj(h)))
            out = F.scaled_dot_product_attention(
                q, keys[:, :, :visible], values[:, :, :visible], attn_mask=mask, scale=1.0
            )
            x = x + attention.out_proj(out.transpose(1, 2).reshape(count, width, self._d_model))
            attention = layer.encoder_attn
            h = layer.encoder_attn_layer_norm(x)
            q = self._split_heads(attention.q_proj(h) * attention.scaling)
            cross_k = self._cross_k[i, first:last, :, :frames]
            if heads is not None and i in heads:
                chosen = heads[i]
                weights[i] = (q[:, chosen] @ cross_k[:, chosen].transpose(-1, -2)).softmax(-1)
                if i == max(heads):
                    return x, weights  # the layers above have no head to report
            out = F.scaled_dot_product_attention(
                q, cross_k, self._cross_v[i, first:last, :, :frames], cross_mask, scale=1.0
            )
            x = x + attention.out_proj(out.transpose(1, 2).reshape(count, width, self._d_model))
            h = layer.final_layer_norm(x)
            x = x + layer.fc2(layer.activation_fn(layer.fc1(h)))
        return decoder.layer_norm(x), weights

    @torch.inference_mode()
    def cross_attention(
        self, row: Row, ids: Sequence[int], heads: Sequence[tuple[int, int]]
    ) -> torch.Tensor:
        """Cross-attention weights of ``heads`` ((layer, head) pairs) when ``row`` reads
        ``ids`` from its first position: shape (len(heads), len(ids), frames).

        For word timings, once a decode is done: ``ids`` is its prompt and tokens (and
        end-of-text), so the pass rewrites the row's keys with what they already were.
        Only the layers up to the deepest head run, and no logits are made.
        """
        if not row.active:
            raise RuntimeError("this row was released; its decode has ended")
        if len(ids) > self.max_positions:
            raise ValueError(f"{len(ids)} tokens: the decoder holds at most {self.max_positions}")
        by_layer: dict[int, list[int]] = {}
        for layer, head in heads:
            by_layer.setdefault(layer, []).append(head)
        tokens = torch.tensor([list(ids)], device=self._device)
        positions = torch.arange(len(ids), device=self._device)[None]
        cross = (self._frames[row.slot], None)
        _, weights = self._forward(tokens, positions, row.slot, 1, len(ids), cross, by_layer)
        row.length = max(row.length, len(ids))
        return torch.stack(
            [weights[layer][0, by_layer[layer].index(head)] for layer, head in heads]
        )

    @torch.inference_mode()
    def _capture(self) -> None:
        pool = None
        side = torch.cuda.Stream(self._device)
        widths = [w for w in WIDTH_BUCKETS if w < self.max_width] + [self.max_width]
        rows = [r for r in ROW_BUCKETS if r < self.capacity] + [self.capacity]
        for count in rows:
            for width in widths:
                ids = torch.zeros((count, width), dtype=torch.long, device=self._device)
                # Warm-up and capture write into the spare slots past the last position.
                positions = torch.arange(
                    self._slots - width, self._slots, device=self._device
                ).repeat(count, 1)
                side.wait_stream(torch.cuda.current_stream(self._device))
                with torch.cuda.stream(side):
                    for _ in range(2):  # cuBLAS workspaces and lazy kernels before capture
                        self._forward(ids, positions, 0, count, self._slots)
                torch.cuda.current_stream(self._device).wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    hidden, _ = self._forward(ids, positions, 0, count, self._slots)
                pool = graph.pool()  # buckets share one pool: one replays at a time
                self._graphs[(count, width)] = _Captured(graph, ids, positions, hidden)
