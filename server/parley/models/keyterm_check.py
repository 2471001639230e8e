"""Asking the model whether it heard a keyterm where it wrote other words.

A final decoded with keyterms has runs of words somewhat like a term, which the bias
could not reach (tiny.en writes "Kubernetes" as "Qubanit" in one voice, "Siobhan" as
"Xiao-ban" in another): the model's first token there was another word's. Once the
decode is done, its row reads the text again with each such run written as its term
(``core.keyterms.to_ask``), from where the two texts part, over the same audio. A run
whose text with the term is at most ``HEARD_MARGIN`` nats less likely than the text
the model wrote, and whose term's own tokens are ``HEARD_TERM_LOGPROB`` probable on
average, is heard as the term: the model, scoring whole texts, finds it nearly as
likely, where greedy decoding never looked past the first token.

The passes run on the ASR thread, after the final's word timings (which read the row
from its start), just before its row is released.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from parley.core.keyterms import HEARD_MARGIN, HEARD_TERM_LOGPROB, to_ask, written_as
from parley.core.words import TimedWord
from parley.models.row_decoder import Row


def heard_keyterms(
    row: Row,
    prompt: Sequence[int],
    words: Sequence[TimedWord],
    terms: Sequence[str],
    encode: Callable[[str], list[int]],
    head: Callable[[torch.Tensor], torch.Tensor],
    eot: int,
) -> tuple[tuple[str, str], ...]:
    """``(letters, term)`` of each asked run the model finds likely enough as ``term``.

    ``row`` holds the decode's audio and ``prompt`` (what its text followed);
    ``encode`` tokenizes text as the decoder writes it, ``head`` makes logits of final
    hidden states."""
    runs = to_ask([(w.word, w.probability) for w in words], terms)
    if not runs:
        return ()
    texts = [w.word.strip() for w in words]
    written = encode(" " + " ".join(texts)) + [eot]
    # The row holds the prompt as the decode fed it; the texts are read from there, each
    # from where it parts from the one before, and projected to logits all at once
    # (reading the vocabulary matrix once, not once a text).
    first = _read(row, prompt, written, 0, len(prompt))
    if first is None:
        return ()
    reads = [first]
    kept = len(prompt) + len(written) - 1  # positions the row holds as the written text's
    asked = []
    for run in runs:
        other = encode(" " + written_as(texts, run)) + [eot]
        parted = _common_prefix(written, other)
        read = _read(row, prompt, other, parted, kept)
        if read is not None:
            kept = len(prompt) + parted  # the row holds the other text after that
            reads.append(read)
            asked.append((run, parted, other))
    hidden = torch.cat([h for h, _ in reads])
    logprobs = torch.log_softmax(head(hidden).float(), dim=-1)
    targets = torch.tensor([t for _, tokens in reads for t in tokens], device=hidden.device)
    scores = logprobs.gather(1, targets[:, None])[:, 0].cpu().numpy()
    scored, *theirs = np.split(scores, np.cumsum([len(tokens) for _, tokens in reads])[:-1])
    heard = []
    for (run, parted, other), their in zip(asked, theirs):
        # The term's own tokens: where the two texts differ, past their shared ending.
        ending = _common_prefix(written[parted:][::-1], other[parted:][::-1])
        term = len(other) - parted - ending
        likely = their.sum() >= scored[parted:].sum() - HEARD_MARGIN
        if term > 0 and likely and their[:term].mean() >= HEARD_TERM_LOGPROB:
            heard.append((run.letters, run.term))
    return tuple(heard)


def _read(
    row: Row, prompt: Sequence[int], tokens: Sequence[int], start: int, kept: int
) -> tuple[torch.Tensor, list[int]] | None:
    """The final hidden states that predict ``tokens[start:]`` after ``prompt`` and
    ``tokens[:start]``, and those tokens (None where the row cannot hold them). The
    row's first ``kept`` positions already hold ``prompt`` and ``tokens``' first."""
    sequence = [*prompt, *tokens]
    first = len(prompt) + start  # the first position scored
    if len(sequence) > row.decoder.max_positions or first >= len(sequence):
        return None
    fed = min(first - 1, kept)
    row.truncate(fed)
    return row.feed(sequence[fed:-1])[first - 1 - fed :], sequence[first:]


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
