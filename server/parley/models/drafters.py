"""Where draft tokens come from: the previous hypothesis, an assistant model, or both.

A drafter proposes the next few tokens given what has been decoded so far; the main
model verifies them in one pass and keeps the longest prefix it agrees with, so a
wrong draft costs time, never accuracy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch

from parley.core.asr import MAX_DRAFT
from parley.models.output_head import OutputHead

MAX_MATCH_NGRAM = 3


class Decoder(Protocol):
    """Decoder passes over several sequences' caches at once (a ``row_decoder.RowDecoder``)."""

    def forward(self, rows: Sequence[Any], feeds: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Append ``feeds[i]`` to ``rows[i]``; the final hidden states of each feed."""
        ...


class DecoderState(Protocol):
    """A decoder's cache for one sequence, ``length`` tokens long (a ``row_decoder.Row``)."""

    length: int

    @property
    def decoder(self) -> Decoder:
        """The decoder whose buffers hold it."""
        ...

    def truncate(self, length: int) -> None:
        """Forget every token after the first ``length``."""
        ...


class Drafter(Protocol):
    """Proposes draft tokens for one decode and learns how many were kept."""

    def propose(self, prompt: Sequence[int], tokens: Sequence[int], limit: int) -> list[int]:
        """Up to ``limit`` tokens likely to follow ``tokens`` (the decode so far, after
        ``prompt``), for the main model to verify in one pass; none where it has nothing
        to offer."""

    def feedback(self, proposed: int, accepted: int) -> None:
        """Told how many of the last ``proposed`` draft tokens the main model kept, to
        adapt its next draft's length."""


class HypothesisDrafter:
    """Drafts from the previous decode of the same (shorter) audio.

    While the new hypothesis repeats the old one, the old one's next tokens are the
    draft. Where they part ways (the old one's last words are often revised once more
    audio arrives), the newest n-gram of the new hypothesis is looked up in the old
    one *near the current position*, and what followed it there is proposed: a
    match far away is usually a repetition ("Hello. Hello.") and wastes a pass. The
    draft length halves after a rejection and doubles after a full acceptance.
    """

    SEARCH_BEHIND = 6
    SEARCH_AHEAD = 10

    def __init__(self, previous: Sequence[int], initial_length: int = 16):
        self.previous = list(previous)
        self.length = initial_length
        self._cursor = 0  # where in ``previous`` the new hypothesis is, by the last draft
        self._start = 0

    def propose(self, prompt: Sequence[int], tokens: Sequence[int], limit: int) -> list[int]:
        previous, n = self.previous, len(tokens)
        limit = min(limit, self.length)
        if limit <= 0 or not previous:
            return []
        start = n if previous[:n] == list(tokens) else self._realign(tokens)
        if start is None or start >= len(previous):
            return []
        self._start = start
        return previous[start : start + limit]

    def _realign(self, tokens: Sequence[int]) -> int | None:
        previous, n = self.previous, len(tokens)
        low = max(0, self._cursor - self.SEARCH_BEHIND)
        high = min(len(previous), self._cursor + self.SEARCH_AHEAD)
        for size in range(min(MAX_MATCH_NGRAM, n), 0, -1):
            tail = list(tokens[n - size :])
            for begin in range(high - size, low - 1, -1):
                if previous[begin : begin + size] == tail:
                    return begin + size
        return None

    def feedback(self, proposed: int, accepted: int) -> None:
        if proposed == 0:
            return
        self._cursor = self._start + accepted + 1
        if accepted == proposed:
            self.length = min(self.length * 2, 64)
        else:
            self.length = max(2, self.length // 2)


class AssistantDrafter:
    """Greedy drafts from a small assistant model sharing the main model's tokenizer.

    A decoder-only assistant (``WhisperForCausalLM``) reads the main encoder's output;
    a full seq2seq assistant brings its own encoder output; either way ``state`` is the
    assistant decoder's row over it (see ``row_decoder``). The
    cache is re-synced to the accepted tokens before each proposal. The draft length
    adapts: longer after full acceptance, shorter after a rejection.
    """

    def __init__(
        self,
        state: DecoderState,
        head: OutputHead,
        suppress: torch.Tensor | None = None,
        eot: int | None = None,
        initial_length: int = 4,
        max_length: int = MAX_DRAFT,
    ):
        self._suppress = suppress  # the main model's suppressed tokens: never worth drafting
        self._eot = eot
        self._state = state
        self._head = head
        self._fed: list[int] = []
        self.length = initial_length
        self._max_length = max_length

    def propose(self, prompt: Sequence[int], tokens: Sequence[int], limit: int) -> list[int]:
        return AssistantDrafter.together([self], [list(prompt) + list(tokens)], [limit])[0]

    def _catch_up(self, context: list[int]) -> list[int]:
        """Forget what the cache holds past its agreement with ``context``; the tokens
        still to feed (at least one, whose logits give the first draft token)."""
        common = 0
        for a, b in zip(self._fed, context):
            if a != b:
                break
            common += 1
        common = min(common, len(context) - 1)
        if common < len(self._fed):
            self._state.truncate(common)
            del self._fed[common:]
        return context[common:]

    @staticmethod
    def together(
        drafters: Sequence[AssistantDrafter], contexts: Sequence[list[int]], limits: Sequence[int]
    ) -> list[list[int]]:
        """Greedy drafts of drafters on one assistant decoder and head, one pass per draft
        position for all their rows. Row after row, each draft token was a pass of its
        own and a wait for its choice: on an H200 (large-v3 shapes) drafting for two
        rows cost more than it saved, and a row outside the first slots replayed no
        captured graph (bench/files_gpu.py)."""
        drafts: list[list[int]] = [[] for _ in drafters]
        limits = [min(limit, d.length) for d, limit in zip(drafters, limits)]
        feeds = {
            i: d._catch_up(context)
            for i, (d, context) in enumerate(zip(drafters, contexts))
            if limits[i] > 0
        }
        while feeds:
            live = list(feeds)
            states = [drafters[i]._state for i in live]
            hidden = states[0].decoder.forward(states, [feeds[i] for i in live])
            for i in live:
                drafters[i]._fed.extend(feeds[i])
            first = drafters[live[0]]
            logits = first._head(torch.stack([h[-1] for h in hidden]))
            if first._suppress is not None:
                logits = logits.masked_fill(first._suppress, float("-inf"))
            feeds = {}
            for i, token in zip(live, logits.argmax(-1).tolist()):
                if token == drafters[i]._eot:
                    continue  # the main model decides the end itself
                drafts[i].append(token)
                if len(drafts[i]) < limits[i]:
                    feeds[i] = [token]
        return drafts

    def feedback(self, proposed: int, accepted: int) -> None:
        if proposed == 0:
            return
        if accepted == proposed:
            self.length = min(self._max_length, self.length + 2)
        else:
            self.length = max(1, self.length - 1)


class ChainedDrafter:
    """The previous hypothesis first; where it has nothing to offer, the assistant."""

    def __init__(self, first: Drafter, second: Drafter):
        self._first, self._second = first, second
        self._last: Drafter | None = None

    @property
    def second(self) -> Drafter:
        """The drafter asked where the first has nothing (the assistant)."""
        return self._second

    def propose(self, prompt: Sequence[int], tokens: Sequence[int], limit: int) -> list[int]:
        return self.propose_first(prompt, tokens, limit) or self._second.propose(
            prompt, tokens, limit
        )

    def propose_first(self, prompt: Sequence[int], tokens: Sequence[int], limit: int) -> list[int]:
        """The first drafter's draft; where it has none, the second one's draft is the one
        to ask for next (``propose`` asks it; ``propose_all`` drafts it with others)."""
        draft = self._first.propose(prompt, tokens, limit)
        self._last = self._first if draft else self._second
        return draft

    def feedback(self, proposed: int, accepted: int) -> None:
        if self._last is not None:
            self._last.feedback(proposed, accepted)


def propose_all(
    drafters: Sequence[Drafter | None],
    prompts: Sequence[Sequence[int]],
    tokens: Sequence[Sequence[int]],
    limits: Sequence[int],
) -> list[list[int]]:
    """Each decode's draft for one step (none where it has no drafter or no room):
    assistant drafters on the same decoder draft together (``AssistantDrafter.together``)."""
    drafts: list[list[int]] = [[] for _ in drafters]
    # By assistant decoder: the decodes it drafts for, and their drafters.
    shared: dict[int, list[tuple[int, AssistantDrafter]]] = {}
    for i, (drafter, limit) in enumerate(zip(drafters, limits)):
        if drafter is None or limit <= 0:
            continue
        if isinstance(drafter, ChainedDrafter):
            drafts[i] = drafter.propose_first(prompts[i], tokens[i], limit)
            if drafts[i]:
                continue
            drafter = drafter.second
        if isinstance(drafter, AssistantDrafter):
            shared.setdefault(id(drafter._state.decoder), []).append((i, drafter))
        else:
            drafts[i] = drafter.propose(prompts[i], tokens[i], limit)
    for members in shared.values():
        together = AssistantDrafter.together(
            [drafter for _, drafter in members],
            [list(prompts[i]) + list(tokens[i]) for i, _ in members],
            [limits[i] for i, _ in members],
        )
        for (i, _), draft in zip(members, together):
            drafts[i] = draft
    return drafts
