"""Whisper's language identification for a batch of rows: the first decoder position
(<|startoftranscript|> alone) scored over the language tokens, all rows in one pass."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch

from parley.core.asr import AsrRequest
from parley.models.output_head import OutputHead
from parley.models.row_decoder import Row, RowDecoder


class Guess(NamedTuple):
    """A request's language: named by the caller (no probability), or detected."""

    language: str | None
    probability: float | None = None
    runner_up: tuple[str, float] | None = None  # the second most likely, and its probability


def detect_languages(
    requests: Sequence[AsrRequest],
    rows: list[Row],
    decoder: RowDecoder,
    head: OutputHead,
    lang_to_id: Mapping[str, int],
    sot: int,
) -> list[Guess]:
    """Each request's language, with its probability and the runner-up where it was
    detected (a request that names its language keeps it; one that names ``languages``
    is detected among them; none is with no ``lang_to_id``, an English-only model).
    The rows are left empty, ready for their prompts."""
    forced = [Guess(r.language) for r in requests]
    if not lang_to_id or all(r.language is not None for r in requests):
        return forced
    hidden = decoder.forward(rows, [[sot]] * len(rows))
    for row in rows:
        row.truncate(0)
    names = [token[2:-2] for token in lang_to_id]
    ids = torch.tensor(list(lang_to_id.values()), device=hidden[0].device)
    logits = head(torch.stack([h[-1] for h in hidden]))[:, ids].float()
    out = []
    for request, row_logits, known in zip(requests, logits, forced):
        if request.language is not None:
            out.append(known)
            continue
        if request.languages:
            allowed = torch.tensor(
                [name in request.languages for name in names], device=row_logits.device
            )
            row_logits = row_logits.masked_fill(~allowed, -math.inf)
        probabilities = row_logits.softmax(-1)
        top = probabilities.topk(2)
        (p1, p2), (first, second) = top.values.tolist(), top.indices.tolist()
        runner_up = (names[second], p2) if p2 > 0.0 else None
        out.append(Guess(names[first], p1, runner_up))
    return out
