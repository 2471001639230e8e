"""The transcript as a client keeps it: finals in stream order, ``speaker_update`` applied.

Pure: messages are the typed messages of ``parley.protocol.messages``. Turns are runs
of words of one speaker (what ``--format rttm`` writes); a pause of ``TURN_GAP_S`` or
more between two of the same speaker's words starts a new turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from parley.core.turns import TurnConfig
from parley.protocol.messages import Final, ServerMessage, SpeakerNames, SpeakerUpdate, Word

# The pause that sets runs of words apart on the server (protocol.md, "speaker"), so that
# written turns end where the speech does and agree with the server's own turns.
TURN_GAP_S = TurnConfig().pause_s


@dataclass(frozen=True)
class SpeakerTurn:
    """A run of one speaker's words (``parley stream --format rttm`` writes these)."""

    start: float
    end: float
    speaker: str | None


class Transcript:
    """Finals by segment id, with their speakers as the latest ``speaker_update`` left them."""

    def __init__(self) -> None:
        self._finals: dict[int, Final] = {}
        self.names: dict[str, str] = {}  # label → known speaker, as ``speaker_names`` last said

    def apply(self, message: ServerMessage) -> None:
        """Keep a ``final``; apply a ``speaker_update`` to its final, and the names of
        ``speaker_names``; ignore the rest."""
        if isinstance(message, SpeakerNames):
            self.names = dict(message.names)
        elif isinstance(message, Final):
            self._finals[message.segment_id] = message
        elif isinstance(message, SpeakerUpdate):
            final = self._finals.get(message.segment_id)
            if final is not None:  # an update never comes before its final (protocol.md)
                self._finals[message.segment_id] = replace(
                    final, speaker=message.speaker, words=message.words
                )

    @property
    def finals(self) -> list[Final]:
        """In stream order, each label a known speaker's name names shown as that name."""
        return [with_names(self._finals[k], self.names) for k in sorted(self._finals)]

    def speakers(self) -> list[str]:
        """Labels in order of first appearance (by time) in the words and finals."""
        seen: list[str] = []
        for final in self.finals:
            for label in [w.speaker for w in final.words] + [final.speaker]:
                if label is not None and label not in seen:
                    seen.append(label)
        return seen

    def turns(self, gap_s: float = TURN_GAP_S) -> list[SpeakerTurn]:
        """Runs of words of one speaker, split where they pause ``gap_s`` or longer."""
        turns: list[SpeakerTurn] = []
        for final in self.finals:
            words = final.words
            if not words and final.text.strip():  # no word times: the final is one turn
                words = [Word(final.text, final.start, final.end, 1.0, final.speaker)]
            for w in words:
                last = turns[-1] if turns else None
                if last and last.speaker == w.speaker and w.start - last.end < gap_s:
                    turns[-1] = SpeakerTurn(last.start, max(last.end, w.end), last.speaker)
                else:
                    turns.append(SpeakerTurn(w.start, w.end, w.speaker))
        return turns


def rttm(turns: list[SpeakerTurn], uri: str) -> str:
    """NIST RTTM lines (``SPEAKER uri 1 start duration <NA> <NA> label <NA> <NA>``)."""
    lines = [
        f"SPEAKER {uri} 1 {t.start:.3f} {t.end - t.start:.3f} <NA> <NA> "
        f"{t.speaker or 'unknown'} <NA> <NA>"
        for t in turns
        if t.end > t.start
    ]
    return "".join(line + "\n" for line in lines)


def with_names(final: Final, names: Mapping[str, str]) -> Final:
    """``final`` with each label ``names`` has a name for (``speaker_names``) shown as it."""
    if not names:
        return final
    words = [replace(w, speaker=names.get(w.speaker or "", w.speaker)) for w in final.words]
    return replace(final, speaker=names.get(final.speaker or "", final.speaker), words=words)
