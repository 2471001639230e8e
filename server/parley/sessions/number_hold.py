"""A session's results on their way out, where a number read out in groups is judged
whole: a final that ends in a number which could still grow into a redacted one (a
card number's first four digits) waits, with every message after it, until the next
final says whether the number goes on (``core.number_chain.NumberChain``).

A short pause ends a segment, so "4539 … 1488 … 0343 … 6467" is four finals of four
digits, none a card number by itself. The wait is bounded in stream time: the number is
done when no speech starts within ``NUMBER_GAP_S`` of the waiting final's end (the VAD
tells a start up to ``SPEECH_CONFIRM_S`` after it happened); when speech
started but its final has not come ``MAX_HOLD_S`` after that end, the waiting finals
leave judged as partials are (a number that may still grow is redacted). They leave at
once when that speech's partial begins with words, not a number. Messages keep their
order.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

from parley.core.number_chain import NUMBER_GAP_S, NumberChain, NumberEdges
from parley.core.redaction import NO_CARRY, Carry
from parley.protocol.messages import (
    Final,
    Finalized,
    Partial,
    ServerMessage,
    SessionEnded,
    SpeechStarted,
)
from parley.sessions.marks import Mark
from parley.workers.decoding import StreamDecoding, final_words

SPEECH_CONFIRM_S = 1.0  # how late a speech start may be told, after it began
MAX_HOLD_S = 6.0  # the longest a final waits for the next, after its own end
MAX_HELD = 128  # messages held behind a waiting final; past it, they leave (as at MAX_HOLD_S)


@dataclass(frozen=True)
class Unshaped:
    """A decode's message before redaction and numerals (``StreamDecoding`` shapes it)."""

    message: Final | Partial
    decoding: StreamDecoding


Item = ServerMessage | Mark | Unshaped


class NumberHold:
    """Messages in, the same messages out in the same order, finals and partials shaped;
    a final whose number may go on waits for the next final (module docstring)."""

    def __init__(self) -> None:
        self._chain: NumberChain[Unshaped] | None = None
        self._held: deque[Item] = deque()  # in order
        self._shaped: dict[int, Final] = {}  # released finals (by id of their Unshaped)
        self._speech_after: bool = False  # speech began within the gap of the held final

    @property
    def deadline(self) -> float | None:
        """The stream time at which the held finals leave whatever comes (``tick``)."""
        held_until = self._chain.held_until if self._chain is not None else None
        if held_until is None:
            return None
        return held_until + (MAX_HOLD_S if self._speech_after else NUMBER_GAP_S + SPEECH_CONFIRM_S)

    def take(self, item: Item) -> list[ServerMessage | Mark]:
        """What may leave now that ``item`` came, in order."""
        if isinstance(item, Unshaped) and isinstance(item.message, Final):
            self._push_final(item)
        elif self.deadline is None:
            return [self._shaped_now(item)]
        elif isinstance(item, (Finalized, SessionEnded)):
            self._held.append(item)
            self._release()  # the client asked for what is said so far; the stream ended
        elif isinstance(item, SpeechStarted) and not self._chain_continues(item.start):
            self._held.append(item)
            self._release()  # a pause longer than the gap: the number was done
        else:
            if isinstance(item, SpeechStarted):
                self._speech_after = True
            self._held.append(self._shaped_now(item))
            if self._speech_after and _begins_with_words(item):
                self._release()  # the next speech does not read the number on: it was done
            elif len(self._held) > MAX_HELD:
                self._release(open_end=True)
        return self._drain()

    def tick(self, stream_time: float) -> list[ServerMessage | Mark]:
        """Audio reached ``stream_time``: held finals past their deadline leave."""
        deadline = self.deadline
        if deadline is not None and stream_time >= deadline:
            self._release(open_end=self._speech_after)
        return self._drain()

    # ------------------------------------------------------------------ internals

    def _chain_continues(self, start: float) -> bool:
        return self._chain is not None and self._chain.continues(start)

    def _push_final(self, item: Unshaped) -> None:
        categories = item.decoding.config.redaction
        if self._chain is None or self._chain.categories != categories:
            self._release()
            self._chain = NumberChain(categories)
        final = item.message
        assert isinstance(final, Final)
        self._held.append(item)
        self._settle(self._chain.push(item, final_words(final), final.start, final.end))
        self._speech_after = False  # what follows is after this final

    def _release(self, open_end: bool = False) -> None:
        if self._chain is not None:
            self._settle(self._chain.close(open_end))

    def _settle(self, released: list[tuple[Unshaped, Carry, bool]]) -> None:
        for item, carry, open_end in released:
            assert isinstance(item.message, Final)
            self._shaped[id(item)] = item.decoding.final(item.message, carry, open_end)
        if self.deadline is None:
            self._speech_after = False

    def _shaped_now(self, item: Item) -> ServerMessage | Mark:
        if not isinstance(item, Unshaped):
            return item
        partial = item.message
        assert isinstance(partial, Partial)
        words = partial.text.split()
        carry = NO_CARRY if self._chain is None else self._chain.carry_into(partial.start, words)
        return replace(partial, text=item.decoding.partial_text(partial.text, carry))

    def _drain(self) -> list[ServerMessage | Mark]:
        out: list[ServerMessage | Mark] = []
        while self._held:
            head = self._held[0]
            if isinstance(head, Unshaped):
                shaped = self._shaped.pop(id(head), None)
                if shaped is None:
                    break  # a final still waiting: all behind it wait too
                out.append(shaped)
            else:
                out.append(head)
            self._held.popleft()
        return out


def _begins_with_words(item: Item) -> bool:
    """A partial whose first word is no number: its speech does not read a number on."""
    if not isinstance(item, Unshaped) or not isinstance(item.message, Partial):
        return False
    words = item.message.text.split()
    return bool(words) and NumberEdges.of(words).lead is None
