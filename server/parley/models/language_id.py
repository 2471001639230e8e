"""Whisper's language identification for a batch of rows: the first decoder position
(<|startoftranscript|> alone) scored over the language tokens, all rows in one pass."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from parley.core.asr import AsrRequest
from parley.models.output_head import OutputHead
from parley.models.row_decoder import Row, RowDecoder


def detect_languages(
    requests: Sequence[AsrRequest],
    rows: list[Row],
    decoder: RowDecoder,
    head: OutputHead,
    lang_to_id: Mapping[str, int],
    sot: int,
) -> list[tuple[str | None, float | None]]:
    """Each request's language, and its probability where it was detected (a request
    that names its language keeps it; one that names ``languages`` is detected among
    them; none is with no ``lang_to_id``, an English-only model). The rows are left
    empty, ready for their prompts."""
    forced: list[tuple[str | None, float | None]] = [(r.language, None) for r in requests]
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
        best = int(probabilities.argmax())
        out.append((names[best], float(probabilities[best])))
    return out
