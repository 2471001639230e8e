"""Whether what a speaker has said so far reads as finished: the text's side of a voice
agent's end of turn (pure).

A pause ends a segment, but not every pause ends a turn: "I'd like to book a flight
to …" stops for a name. Whisper shows it in what it writes: a sentence it hears broken
off ends in "…", a comma or no punctuation, and an English one on a word no sentence
ends with ("the", "and", "my"). The turn-based wires (Flux's ``eot_threshold``,
AssemblyAI's ``end_of_turn_confidence_threshold``) end a turn at a pause only where its
text reads finished at least as much as they ask; otherwise the turn waits for more
speech, or for their longest quiet (bench/README.md, "Turns that pause mid-sentence").

The score is one of a few levels, not a probability a model learned: a text ending a
sentence (``.``, ``?``, ``!``) is FINISHED; one with no end punctuation at all (an
unpunctuated decode) cannot be judged and is UNKNOWN, which every default threshold
ends, as a pause always did; a trailing "…", ``,`` or ``:`` is TRAILING; a last word that
continues a sentence is CONTINUED.
"""

from __future__ import annotations

import re

FINISHED = 0.9
UNKNOWN = 0.75
TRAILING = 0.2
CONTINUED = 0.1

# English words that a sentence ends with only when broken off, whatever Whisper put
# after them: articles, possessives, conjunctions and fillers ("so" and prepositions
# end real sentences: "I think so.", "what it's about.").
_NEVER_LAST = frozenset(
    "a an the my your his her our their its and or but nor because if although though "
    "unless whereas um uh er erm".split()
)
# Words that end a finished sentence with its full stop, but when written with none
# (or trailing off) show it goes on: prepositions and linking verbs.
_GOES_ON = _NEVER_LAST | frozenset(
    "to of in on at for with from by about into onto than as like that which who whose "
    "is are was were am be been being".split()
)
_ENDS_SENTENCE = re.compile(r"[.?!]['\")\]]*$")
_TRAILS = re.compile(r"(\.\.\.|…|[,;:\-—])['\")\]]*$")
_EDGE = re.compile(r"^\W+|\W+$")


def completion(text: str, english: bool = True) -> float:
    """How finished ``text`` reads (FINISHED, UNKNOWN, TRAILING or CONTINUED); the
    English word rules only where ``english``. An empty text is UNKNOWN."""
    words = text.split()
    if not words:
        return UNKNOWN
    last = words[-1]
    core = _EDGE.sub("", last).lower()
    if english and core in _NEVER_LAST:
        return CONTINUED
    if _TRAILS.search(last):
        return TRAILING
    if _ENDS_SENTENCE.search(last):
        return FINISHED
    if english and core in _GOES_ON:
        return CONTINUED
    return UNKNOWN
