"""What a session's decodes are given besides their audio: the latest finished partial's
tokens as a draft for the same segment (speculative decoding checks them for free), and
the tokens of the latest finals as the prompt (``context_tokens``)."""

from __future__ import annotations

import concurrent.futures
from collections import deque

FINALS_KEPT = 8  # finals whose tokens may make the prompt


class DecodeHints:
    """A session's drafts (its last partial's tokens) and prompt (its latest finals)."""

    def __init__(self, hypothesis_drafts: bool, context_tokens: int):
        self._drafts = hypothesis_drafts
        self._context_tokens = context_tokens
        self._partial: tuple[concurrent.futures.Future, int] | None = None  # (decode, segment)
        self._hypothesis: tuple[int, tuple[int, ...]] | None = None  # (segment, latest tokens)
        self._finals: deque[concurrent.futures.Future] = deque(maxlen=FINALS_KEPT)

    def partial(self, future: concurrent.futures.Future, segment_id: int) -> None:
        """The partial now decoding this segment (its tokens count once it is done)."""
        self._partial = (future, segment_id)

    def final(self, future: concurrent.futures.Future) -> None:
        """A final submitted (its tokens join the prompt once it is done)."""
        if self._context_tokens:
            self._finals.append(future)

    def draft_for(self, segment_id: int) -> tuple[int, ...] | None:
        """The tokens of the latest finished partial of this segment, if any."""
        self._note_hypothesis()
        if not self._drafts or self._hypothesis is None:
            return None
        segment, tokens = self._hypothesis
        return tokens if segment == segment_id else None

    def _note_hypothesis(self) -> None:
        """Keep the last partial's tokens once it is done, before it is replaced."""
        if self._partial is None:
            return
        future, segment = self._partial
        if (
            future.done()
            and not future.cancelled()
            and future.exception() is None
            and future.result().tokens
        ):
            self._hypothesis = (segment, future.result().tokens)

    def context(self) -> tuple[int, ...]:
        """Tokens of the latest finished finals, at most ``context_tokens`` of them."""
        limit = self._context_tokens
        tokens: list[int] = []
        for future in reversed(self._finals):
            if len(tokens) >= limit:
                break
            if future.done() and not future.cancelled() and future.exception() is None:
                tokens[:0] = future.result().tokens
        return tuple(tokens[-limit:]) if limit else ()
