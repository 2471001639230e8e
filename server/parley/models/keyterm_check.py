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

A name the model's language prior fights ("Saoirse" heard as "Source", "Joaquin" as
"Zokwinn") falls short of that however clearly it was said. A near miss
(``core.keyterms.near_miss``) is asked once more, with the term in Whisper's own prompt
(``<|startofprev|>``), as a caller's prompt would hold it: there the model expects the
name, and a run is heard as the term where its text is then the likelier by
``PROMPTED_MARGIN`` nats and the term's tokens are nearly certain
(``PROMPTED_TERM_LOGPROB``). Where nobody said the term, the words the model wrote
stay the likelier even so.

The passes run on the ASR thread, after the final's word timings (which read the row
from its start), just before its row is released.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from parley.core.keyterms import (
    HEARD_MARGIN,
    HEARD_TERM_LOGPROB,
    PROMPTED_MARGIN,
    PROMPTED_TERM_LOGPROB,
    Respelling,
    near_miss,
    to_ask,
    written_as,
)
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
    prev: int,
) -> tuple[tuple[str, str], ...]:
    """``(letters, term)`` of each asked run the model finds likely enough as ``term``.

    ``row`` holds the decode's audio and ``prompt`` (what its text followed);
    ``encode`` tokenizes text as the decoder writes it, ``head`` makes logits of final
    hidden states; ``prev`` is ``<|startofprev|>``, which begins a prompt of earlier text."""
    runs = to_ask([(w.word, w.probability) for w in words], terms)
    if not runs:
        return ()
    texts = [w.word.strip() for w in words]
    reading = _Reading(row, texts, encode, head, eot)
    # The row holds the prompt as the decode fed it: the first reading goes on from there.
    heard: list[tuple[str, str]] = []
    missed: list[Respelling] = []
    for run, margin, term_logprob in reading.margins(prompt, runs, held=len(prompt)):
        if margin >= -HEARD_MARGIN and term_logprob >= HEARD_TERM_LOGPROB:
            heard.append((run.letters, run.term))
        elif near_miss(margin, term_logprob):
            missed.append(run)
    after = list(prompt[1:] if prompt and prompt[0] == prev else prompt)
    for term in dict.fromkeys(run.term for run in missed):  # each once, in the runs' order
        prompted = [prev, *encode(" " + term), *after]
        mine = [run for run in missed if run.term == term]
        for run, margin, term_logprob in reading.margins(prompted, mine, held=0):
            if margin >= PROMPTED_MARGIN and term_logprob >= PROMPTED_TERM_LOGPROB:
                heard.append((run.letters, run.term))
    return tuple(heard)


class _Reading:
    """One final's words read again by its row, with runs written as terms."""

    def __init__(
        self,
        row: Row,
        texts: list[str],
        encode: Callable[[str], list[int]],
        head: Callable[[torch.Tensor], torch.Tensor],
        eot: int,
    ):
        self._row, self._texts, self._encode, self._head = row, texts, encode, head
        self._eot = eot
        self._written = encode(" " + " ".join(texts)) + [eot]

    def margins(
        self, prompt: Sequence[int], runs: Sequence[Respelling], held: int
    ) -> list[tuple[Respelling, float, float]]:
        """Each run read as its term after ``prompt``: how much likelier (nats) its text
        is than the text the model wrote, and its term's own tokens' mean log-probability.
        The row holds ``prompt``'s first ``held`` positions already; the texts are read
        each from where it parts from the one before, and projected to logits at once
        (reading the vocabulary matrix once, not once a text)."""
        written = self._written
        first = _read(self._row, prompt, written, 0, held)
        if first is None:
            return []
        reads = [first]
        kept = len(prompt) + len(written) - 1  # positions the row holds as the written text's
        asked = []
        for run in runs:
            other = self._encode(" " + written_as(self._texts, run)) + [self._eot]
            parted = _common_prefix(written, other)
            read = _read(self._row, prompt, other, parted, kept)
            if read is not None:
                kept = len(prompt) + parted  # the row holds the other text after that
                reads.append(read)
                asked.append((run, parted, other))
        hidden = torch.cat([h for h, _ in reads])
        logprobs = torch.log_softmax(self._head(hidden).float(), dim=-1)
        targets = torch.tensor([t for _, tokens in reads for t in tokens], device=hidden.device)
        scores = logprobs.gather(1, targets[:, None])[:, 0].cpu().numpy()
        scored, *theirs = np.split(scores, np.cumsum([len(tokens) for _, tokens in reads])[:-1])
        out = []
        for (run, parted, other), their in zip(asked, theirs):
            # The term's own tokens: where the two texts differ, past their shared ending.
            ending = _common_prefix(written[parted:][::-1], other[parted:][::-1])
            term = len(other) - parted - ending
            if term > 0:
                margin = float(their.sum() - scored[parted:].sum())
                out.append((run, margin, float(their[:term].mean())))
        return out


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
