"""Greedy Whisper decoding of many rows at once, each verifying its own draft (lossless).

Each step feeds every row its last chosen token plus its draft, all in one batched
pass. Per row, the main model's greedy choice at every position decides: the draft
is kept up to its first disagreement, and the model's own choice there is the next
token; the rejected rest is rolled back by moving the row's length. The output of
every row is therefore the main model's plain greedy output, token for token:
drafts and batching only change how many passes it takes. A row with keyterms
(``core.keyterms.KeytermBias``) has its logits biased at every position by the tokens
before that position, drafted ones included, so the same holds of greedy decoding
under that bias. A row told not to repeat itself (``no_repeat``) has the tokens that would
write a run of that many a second time masked at every position, by the same rule.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from parley.core.asr import DecodeStats, StepReport
from parley.core.keyterms import KeytermBias
from parley.core.quality import repeat_bans
from parley.models.drafters import Drafter, propose_all
from parley.models.output_head import OutputHead
from parley.models.row_decoder import Row, RowDecoder


@dataclass(eq=False)
class RowDecode:
    """One sequence being decoded greedily on its own row (a ``core.asr.Decode``)."""

    row: Row
    prompt: list[int]
    sot_index: int  # where <|startoftranscript|> is in the prompt
    room: int  # most tokens after the prompt
    drafter: Drafter | None = None
    tokens: list[int] = field(default_factory=list)
    token_logprobs: list[float] = field(default_factory=list)  # of each of ``tokens``
    next_token: int = -1  # chosen, not yet fed
    next_logprob: float = 0.0  # of next_token
    logprob: float = 0.0  # sum over chosen tokens, end-of-text included
    no_speech_prob: float = 0.0
    stats: DecodeStats = field(default_factory=DecodeStats)
    eot: int = -1
    bias: KeytermBias | None = None
    no_repeat: int = 0  # no run of this many tokens written twice (0: no such rule)
    temperature: float = 0.0  # above 0: tokens drawn, by ``sampler``, not the likeliest
    sampler: torch.Generator | None = None

    @property
    def finished(self) -> bool:
        return self.next_token == self.eot or len(self.tokens) >= self.room

    @property
    def drafting(self) -> bool:
        return self.drafter is not None

    @property
    def avg_logprob(self) -> float:
        return self.logprob / (len(self.tokens) + 1)  # the end-of-text choice counts


class GreedyVerifier:
    """Chooses tokens for rows of one decoder: prompts first, then batched verify steps."""

    def __init__(
        self,
        decoder: RowDecoder,
        head: OutputHead,
        suppress: Sequence[int],
        begin_suppress: Sequence[int],
        eot: int,
        no_speech_token: int | None,
        vocab: int,
        device: torch.device,
    ):
        self.decoder = decoder
        self.head = head
        self.suppress = torch.zeros(vocab, dtype=torch.bool, device=device)
        self.suppress[list(suppress)] = True
        self._begin_suppress = self.suppress.clone()
        self._begin_suppress[list(begin_suppress)] = True
        self.eot = eot
        self._no_speech_token = no_speech_token

    @torch.inference_mode()
    def prime(self, decodes: Sequence[RowDecode]) -> None:
        """Feed every decode its prompt in one pass and choose its first token."""
        hiddens = self.decoder.forward([d.row for d in decodes], [d.prompt for d in decodes])
        last = self.head(torch.stack([h[-1] for h in hiddens]))
        _add_bias(last, [(i, d.bias, []) for i, d in enumerate(decodes)])
        first = last.masked_fill(self._begin_suppress, -math.inf)
        choices = first.argmax(-1)
        _draw(first, choices, [(i, d) for i, d in enumerate(decodes) if d.temperature])
        logprobs = first.log_softmax(-1).gather(1, choices[:, None])[:, 0].tolist()
        if self._no_speech_token is not None:
            at_sot = self.head(torch.stack([h[d.sot_index] for h, d in zip(hiddens, decodes)]))
            no_speech = at_sot.softmax(-1)[:, self._no_speech_token].tolist()
        else:
            no_speech = [0.0] * len(decodes)
        for d, token, logprob, p in zip(decodes, choices.tolist(), logprobs, no_speech):
            d.eot = self.eot
            d.next_token, d.next_logprob, d.logprob, d.no_speech_prob = token, logprob, logprob, p

    @torch.inference_mode()
    def step(self, decodes: Sequence[RowDecode], budgets: Sequence[int]) -> list[StepReport]:
        """One batched pass: each decode feeds its next token and a draft of ≤ its budget."""
        limits = []
        for d, budget in zip(decodes, budgets):
            if d.finished:
                raise ValueError("a finished decode cannot take another step")
            d.tokens.append(d.next_token)
            d.token_logprobs.append(d.next_logprob)
            # a drawn token is no greedy choice a draft could be checked against
            limits.append(0 if d.temperature else min(budget, d.room - len(d.tokens) - 1))
        drafts = propose_all(
            [d.drafter for d in decodes],
            [d.prompt for d in decodes],
            [d.tokens for d in decodes],
            limits,
        )
        feeds = [[d.next_token] + draft for d, draft in zip(decodes, drafts)]
        hiddens = self.decoder.forward([d.row for d in decodes], feeds)
        logits = self.head(torch.cat(hiddens))
        if any(d.bias is not None for d in decodes):
            biased, offset = [], 0
            for d, draft in zip(decodes, drafts):
                biased += [
                    (offset + j, d.bias, d.tokens + draft[:j]) for j in range(len(draft) + 1)
                ]
                offset += len(draft) + 1
            _add_bias(logits, biased)
        if any(d.no_repeat for d in decodes):
            _ban_repeats(logits, decodes, drafts)
        logits = logits.masked_fill(self.suppress, -math.inf)
        likeliest = logits.argmax(-1)
        if any(d.temperature for d in decodes):  # a drawing row has no draft: one position
            ends = itertools.accumulate(len(draft) + 1 for draft in drafts)
            _draw(logits, likeliest, [(e - 1, d) for e, d in zip(ends, decodes) if d.temperature])
        choices = likeliest.tolist()
        kept_rows: list[int] = []
        picked: list[int] = []
        keeps: list[int] = []
        offset = 0
        for draft in drafts:
            mine = choices[offset : offset + len(draft) + 1]
            kept = 0
            while kept < len(draft) and draft[kept] == mine[kept] and draft[kept] != self.eot:
                kept += 1
            keeps.append(kept)
            kept_rows.extend(range(offset, offset + kept + 1))
            picked.extend(draft[:kept] + [mine[kept]])
            offset += len(draft) + 1
        rows = torch.tensor(kept_rows, device=logits.device)
        chosen = torch.tensor(picked, device=logits.device)
        gained = (logits[rows, chosen] - logits[rows].logsumexp(-1)).tolist()
        reports, at = [], 0
        for d, draft, kept in zip(decodes, drafts, keeps):
            d.stats.passes += 1
            mine = gained[at : at + kept + 1]
            d.logprob += math.fsum(mine)
            d.token_logprobs.extend(mine[:kept])
            d.next_logprob = mine[kept]
            at += kept + 1
            if draft:
                d.stats.verify_steps += 1
                d.stats.drafted += len(draft)
                d.stats.accepted += kept
                assert d.drafter is not None  # only a drafter drafts
                d.drafter.feedback(len(draft), kept)
                d.row.truncate(d.row.length - (len(draft) - kept))  # forget the rejected
            d.tokens.extend(draft[:kept])
            d.next_token = picked[at - 1]
            reports.append(StepReport(len(draft), kept))
        return reports


# Every decode that draws its tokens begins from this seed: the same audio, prompt and
# temperature draw the same text each time (a final does not change between runs).
SAMPLER_SEED = 0


def sampler(device: torch.device) -> torch.Generator:
    """A drawing decode's own generator, seeded."""
    return torch.Generator(device=device).manual_seed(SAMPLER_SEED)


def _draw(
    logits: torch.Tensor, choices: torch.Tensor, drawing: Sequence[tuple[int, RowDecode]]
) -> None:
    """In ``choices`` (the likeliest of each position of ``logits``), the token at each
    (position, decode) of a decode that draws its tokens drawn instead, from its
    distribution at its temperature."""
    for i, d in drawing:
        probabilities = (logits[i].float() / d.temperature).softmax(-1)
        choices[i] = torch.multinomial(probabilities, 1, generator=d.sampler)[0]


def _add_bias(
    logits: torch.Tensor, positions: Sequence[tuple[int, KeytermBias | None, Sequence[int]]]
) -> None:
    """Add each (row of ``logits``, bias, text before that position)'s keyterm bonuses."""
    rows: list[int] = []
    tokens: list[int] = []
    values: list[float] = []
    for row, bias, before in positions:
        if bias is None:
            continue
        for token, bonus in bias.bonuses(before).items():
            rows.append(row)
            tokens.append(token)
            values.append(bonus)
    if rows:
        where = (
            torch.tensor(rows, device=logits.device),
            torch.tensor(tokens, device=logits.device),
        )
        logits.index_put_(
            where, torch.tensor(values, device=logits.device, dtype=logits.dtype), accumulate=True
        )


def _ban_repeats(
    logits: torch.Tensor, decodes: Sequence[RowDecode], drafts: Sequence[Sequence[int]]
) -> None:
    """Mask, at each position of each row told not to repeat itself, the tokens that would
    write one of its runs a second time (``core.quality.repeat_bans``)."""
    offset = 0
    for d, draft in zip(decodes, drafts):
        if d.no_repeat:
            for j in range(len(draft) + 1):
                banned = repeat_bans(d.tokens + list(draft[:j]), d.no_repeat)
                if banned:
                    logits[offset + j, sorted(banned)] = -math.inf
        offset += len(draft) + 1
