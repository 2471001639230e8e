"""The speakers of the turns a turn-based wire has sent, kept so that a later
``speaker_update`` can be told as a revision of the turn it changed (AssemblyAI's
``SpeakerRevision``).

Parley revises a final's speakers with a ``speaker_update`` (protocol.md section 3): a
newcomer confirmed, a merge, a checkpoint's or the closing relabel. AssemblyAI's wire
revises turns instead, by ``turn_order``, each with all its words' speakers and its
``speaker_label``, only those that changed, one message per revision. A relabel's
updates come one after another, so the turns they change are gathered here and said
together once something else is to be sent: before the next message, and at the
latest before the stream's last one.
"""

from __future__ import annotations

from collections import Counter

from parley.protocol.messages import Final, SpeakerUpdate, Word


def most_heard(words: list[Word]) -> str | None:
    """The speaker of most of ``words`` (None if none has one)."""
    speakers = Counter(w.speaker for w in words if w.speaker is not None)
    most = speakers.most_common(1)
    return most[0][0] if most else None


class RevisedTurns:
    """The words of every turn sent, final by final, and the turns revised since the
    last revision was said."""

    def __init__(self) -> None:
        self._turn_of: dict[int, int] = {}  # a final's segment id → its turn
        self._finals: dict[int, dict[int, list[Word]]] = {}  # turn → segment id → words
        self._revised: dict[int, None] = {}  # turns revised and not yet said, in order

    def heard(self, turn: int, final: Final) -> None:
        """A final the wire sent in turn number ``turn``."""
        self._turn_of[final.segment_id] = turn
        self._finals.setdefault(turn, {})[final.segment_id] = list(final.words)

    def revise(self, update: SpeakerUpdate) -> int | None:
        """Apply ``update``; the turn it changed, or None where it changed none the wire
        sent (a final with no words, or no speaker moved)."""
        turn = self._turn_of.get(update.segment_id)
        if turn is None:
            return None
        finals = self._finals[turn]
        before = [w.speaker for w in finals[update.segment_id]]
        if before == [w.speaker for w in update.words]:
            return None
        finals[update.segment_id] = list(update.words)
        self._revised[turn] = None
        return turn

    def words(self, turn: int) -> list[Word]:
        """Turn ``turn``'s words as they stand, its finals in the order they came."""
        return [w for words in self._finals.get(turn, {}).values() for w in words]

    def take(self) -> list[int]:
        """The turns revised since the last call, in the order first revised."""
        revised, self._revised = list(self._revised), {}
        return revised
