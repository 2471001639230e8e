"""Which label a relabelled speaker keeps: the labels a session's finals gave most of its
words' time (``SpeakerTrack``'s checkpoint and closing relabels)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TypeVar

from parley.protocol.messages import Final, Word

K = TypeVar("K", bound=Hashable)
V = TypeVar("V", bound=Hashable)


def kept_numbers(finals: list[Final], heard: list[list[int | None]]) -> dict[int, int]:
    """Each of the closing timeline's speakers (``heard``: each final's words' speakers
    there) → the label number the ``finals`` gave most of its words' time, one to one, so
    that a checkpoint renames as few of the labels a client has seen as it can."""
    shared = (
        (speaker, int(w.speaker[1:]), w)
        for final, speakers in zip(finals, heard)
        for w, speaker in zip(final.words, speakers)
        if speaker is not None and w.speaker is not None
    )
    return most_shared(shared, one_to_one=True)


def renamed_labels(pairs: list[tuple[Final, Final]]) -> dict[str | None, str | None]:
    """Each label of the finals as sent → the label most of its words' time took when
    relabelled (``pairs``: each final as sent and as relabelled)."""
    shared = (
        (word.speaker, now.speaker, word)
        for sent, relabelled in pairs
        for word, now in zip(sent.words, relabelled.words)
    )
    return most_shared(shared, one_to_one=False)


def most_shared(pairs: Iterable[tuple[K, V, Word]], one_to_one: bool) -> dict[K, V]:
    """Each ``K`` → the ``V`` it shares the most word time with (``pairs``: a word's K, its
    V, the word), the most shared first; with ``one_to_one``, no V goes to two."""
    shared: dict[tuple[K, V], float] = {}
    for key, value, word in pairs:
        shared[key, value] = shared.get((key, value), 0.0) + max(word.end - word.start, 1e-3)
    chosen: dict[K, V] = {}
    for key, value in sorted(shared, key=lambda pair: -shared[pair]):
        if key not in chosen and not (one_to_one and value in chosen.values()):
            chosen[key] = value
    return chosen


def speakers_changed(sent: Final, relabelled: Final) -> bool:
    return relabelled.speaker != sent.speaker or any(
        a.speaker != b.speaker for a, b in zip(relabelled.words, sent.words)
    )
