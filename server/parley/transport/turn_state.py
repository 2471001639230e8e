"""A voice agent's turn over a session's messages, for the turn-based wires (Deepgram
Flux's /v2/listen, AssemblyAI's /v3/ws).

A turn starts at the first speech after the last one ended and gathers its segments'
finals; the open segment's latest partial is its tail. When it ends is each wire's
rule, but both share two signs. A final cut by silence finds speech begun again when
it is decoded (the next segment's messages wait behind it, in stream order), so the
speaker went on after a pause shorter than the decode, and the turn goes on too. And a
turn whose text reads unfinished at a pause ("a flight to …", ``core.turn_completion``)
goes on too, until more speech or the wire's longest quiet (``QuietLimit``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from parley.core.turn_completion import completion
from parley.protocol.messages import Final, FinalReason, Partial, Word
from parley.sessions.marks import Reply
from parley.sessions.session import Session

FORCED = "force_end"  # the Reply that follows a turn its client ended (its final first)


@dataclass
class Turn:
    """The open turn: its index, start, finals and partial (None between turns)."""

    index: int = 0
    start: float = 0.0
    open: bool = False
    texts: list[str] = field(default_factory=list)  # its finals' texts
    words: list[Word] = field(default_factory=list)  # and words
    languages: Counter[str] = field(default_factory=Counter)  # words by their language
    partial: str = ""  # the open segment's latest partial
    # that partial's confidence, which each of its words is given (they have none of
    # their own: a partial is decoded without word times or probabilities)
    partial_confidence: float = 0.0

    def begin(self, at: float) -> None:
        self.open, self.start = True, at

    def heard_partial(self, partial: Partial) -> None:
        """The open segment's latest partial: the turn's tail until its final."""
        self.partial, self.partial_confidence = partial.text.strip(), partial.confidence or 0.0

    def heard(self, final: Final) -> None:
        """A segment's final: its text and words join the turn's; the partial is done."""
        self.partial, self.partial_confidence = "", 0.0
        if final.text.strip():
            self.texts.append(final.text.strip())
            self.words.extend(final.words)
            if final.language is not None:
                self.languages[final.language] += max(len(final.words), 1)

    def transcript(self) -> str:
        """What the turn has said so far: its finals, then the partial."""
        return " ".join([*self.texts, self.partial] if self.partial else self.texts)

    def completion(self) -> float:
        """How finished its text reads (``core.turn_completion``), by English's word
        rules too where most of its words were heard in English, or in no language."""
        heard = self.languages.most_common(1)
        return completion(self.transcript(), english=not heard or heard[0][0] == "en")

    def finish(self) -> None:
        """The turn ended: the next one starts empty, numbered one more."""
        self.index += 1
        self.open = False
        self.texts, self.words, self.partial = [], [], ""
        self.partial_confidence = 0.0
        self.languages = Counter()


def turn_ends(final: Final, stream: Session, silence_ends: bool = True) -> bool:
    """Whether ``final`` ends its turn: the stream's end always does; a final cut by
    silence does where the wire lets silence end turns (``silence_ends``), unless speech
    is open again as it is told (see the module's docstring)."""
    if final.reason is FinalReason.END_OF_STREAM:
        return True
    speech_open = stream.quiet_since is None
    return silence_ends and final.reason is FinalReason.SILENCE and not speech_open


def reads_unfinished(turn: Turn, final: Final, threshold: float) -> bool:
    """Whether a pause that cut ``final`` (heard by ``turn``) is mid-sentence: the turn's
    text reads less finished than ``threshold``, so it waits for more speech, or for the
    wire's longest quiet."""
    return final.reason is FinalReason.SILENCE and turn.completion() < threshold


@dataclass
class QuietLimit:
    """Ends what waits for more speech (an open turn) once it has been quiet for a wire's
    longest wait: a Reply of ``kind`` is queued (once for each stretch of quiet), which
    goes out after every final before it. Checked as audio comes in."""

    kind: str
    _marked: float | None = None  # the stream time the quiet marked began

    async def check(self, stream: Session, waiting: bool, limit_s: float) -> None:
        """Queue the Reply if something ``waiting`` (an open turn, a held item) has been
        quiet ``limit_s``."""
        quiet = stream.quiet_since
        if (
            waiting
            and quiet is not None
            and quiet != self._marked
            and stream.stream_time - quiet >= limit_s
        ):
            self._marked = quiet
            await stream.mark(Reply(self.kind, {}))


async def end_turn_now(stream: Session) -> None:
    """The client ends the open turn (Flux's ForceEndTurn, AssemblyAI's ForceEndpoint):
    its segment is finalized, and a Reply(FORCED) follows that final."""
    await stream.finalize()
    await stream.mark(Reply(FORCED))
