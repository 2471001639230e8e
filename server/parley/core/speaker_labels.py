"""The labels a client sees: S1…Sn, numbered in the order the speakers first appear.

Diarization's own speaker indices have gaps (a speaker founded and then merged, one
never confirmed), so the client never sees them. A speaker gets the next number when
it is first sent in a final or a ``speaker_update``. When diarization later shows a
numbered speaker as someone else (merged, or it was never confirmed):

- if that someone has no number yet, it takes this one over;
- else the number is freed for the next new speaker, unless a final that carries it
  has settled (its labels can no longer change, so the number stays taken).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence


class SpeakerLabels:
    """The labels a client sees, ``S1``…``Sn`` in order of first appearance in a final."""

    def __init__(self) -> None:
        self._numbers: dict[int, int] = {}  # shown speaker → its number
        self._settled: set[int] = set()  # numbers in finals that can no longer change

    def label(self, speaker: int | None, assign: bool = True) -> str | None:
        """``S<n>`` for ``speaker``; a new number only if ``assign`` (None: no speaker)."""
        if speaker is None:
            return None
        number = self._numbers.get(speaker)
        if number is None and assign:
            taken = set(self._numbers.values()) | self._settled
            number = next(n for n in range(1, len(taken) + 2) if n not in taken)
            self._numbers[speaker] = number
        return None if number is None else f"S{number}"

    @classmethod
    def numbered(cls, numbers: Mapping[int, int]) -> SpeakerLabels:
        """Labels that start with these numbers given (speaker → number)."""
        labels = cls()
        labels._numbers = dict(numbers)
        return labels

    def taken_over(self, by: Mapping[int, int]) -> SpeakerLabels:
        """These labels for other speakers: ``by`` maps each new speaker to the one here
        whose number it takes over. Every number given here stays taken, so a speaker
        taking over none gets a new one."""
        labels = SpeakerLabels()
        labels._numbers = {
            new: self._numbers[old] for new, old in by.items() if old in self._numbers
        }
        labels._settled = self._settled | set(self._numbers.values())
        return labels

    def settle(self, labels: Iterable[str | None]) -> None:
        """These labels were sent in a final that has settled."""
        self._settled.update(int(label[1:]) for label in labels if label is not None)

    def follow(self, aliases: Sequence[int]) -> None:
        """Diarization now shows speaker ``i`` as ``aliases[i]``: move or free numbers."""
        for speaker, number in sorted(self._numbers.items(), key=lambda item: item[1]):
            shown_as = aliases[speaker] if speaker < len(aliases) else speaker
            if shown_as == speaker:
                continue
            del self._numbers[speaker]
            if shown_as not in self._numbers:
                self._numbers[shown_as] = number
