"""OpenAI's ``semantic_vad`` on the realtime transcription wire (protocol.md section 10):
an item is a turn, not a segment.

With ``server_vad`` each segment the VAD closes is an item, committed as it closes. With
``semantic_vad`` a segment cut by a pause is committed only once its final's text is
read: where the item's text reads finished enough for the session's ``eagerness``
(``core.turn_completion``), it is committed then; where not ("a flight to …"), the item
is held, the next speech goes on in it, and it is committed when its text reads
finished, when the client commits, when the stream ends, or after the eagerness's
longest quiet (OpenAI's 8, 4 and 2 s).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parley.protocol.messages import Final, FinalReason
from parley.sessions.session import Session
from parley.transport.openai_events import Item
from parley.transport.turn_state import QuietLimit, Turn

# eagerness → (how finished the item's text must read to be committed at a pause, the
# longest quiet an item is held, s)
EAGERNESS = {"low": (0.8, 8.0), "medium": (0.7, 4.0), "high": (0.5, 2.0), "auto": (0.7, 4.0)}
HELD_TOO_LONG = "semantic_vad_timeout"  # the Reply that commits an item held that long


@dataclass
class TurnItem:
    """An item's speech so far, in semantic mode: its finals as a turn of the turn-based
    wires gathers them (``turn_state.Turn``), the stream time the last one ended and the
    seconds of audio they took."""

    item: Item
    turn: Turn = field(default_factory=Turn)
    end: float = 0.0
    seconds: float = 0.0

    def heard(self, final: Final) -> None:
        self.turn.heard(final)
        self.end = final.end
        self.seconds += final.end - final.start

    def reads_finished(self, eagerness: str) -> bool:
        """Whether the item's text so far reads finished enough to commit it at a pause."""
        return self.turn.completion() >= EAGERNESS[eagerness][0]


def longest_wait_s(eagerness: str) -> float:
    return EAGERNESS[eagerness][1]


class HeldItems:
    """One connection's items in semantic mode: each open item's speech, and the one
    held at a pause, whose next speech goes on in it."""

    def __init__(self) -> None:
        self._turns: dict[str, TurnItem] = {}
        self.held: TurnItem | None = None
        self._quiet = QuietLimit(HELD_TOO_LONG)

    async def check(self, session: Session, eagerness: str) -> None:
        """Queue the Reply that commits a held item, once it has been quiet too long."""
        await self._quiet.check(session, self.held is not None, longest_wait_s(eagerness))

    def heard(self, item: Item, final: Final, eagerness: str) -> TurnItem | None:
        """``final`` of ``item``'s speech: the item to commit now, or None where it is held
        (cut by a pause, its text reading unfinished)."""
        turn = self._turns.setdefault(item.id, TurnItem(item))
        turn.heard(final)
        if final.reason is FinalReason.SILENCE and not turn.reads_finished(eagerness):
            self.held = turn
            return None
        self.drop(item)
        return turn

    def take_held(self) -> TurnItem | None:
        """The held item, to commit now (too long quiet, the client's commit, the end)."""
        turn = self.held
        if turn is not None:
            self.drop(turn.item)
        return turn

    def drop(self, item: Item) -> None:
        """Forget ``item``'s speech (committed, failed or cleared)."""
        self._turns.pop(item.id, None)
        if self.held is not None and self.held.item is item:
            self.held = None
