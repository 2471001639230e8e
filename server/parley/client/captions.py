"""Finals as subtitle cues that a viewer can read: at most two lines of 42 characters
and 7 seconds each (the common broadcast limits; openai-whisper's ``--max_line_width``
and ``--max_line_count`` and WhisperX's are the same idea), cut between words by their
times, at each change of speaker, and before a sentence the cue cannot hold whole.

A final of 15 s is one block of text that no one can read under a video; a cue per
final is what the finals are, not what subtitles need. A final without words (times of
its own words unknown) stays one cue, its text wrapped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from parley.core.words import ends_sentence
from parley.protocol.messages import Final, Word

LINE_CHARS = (8, 1000)  # a line's characters: the fewest and most a style may ask
LINES = (1, 10)


@dataclass(frozen=True)
class CaptionStyle:
    """How much one cue may hold."""

    line_chars: int = 42
    lines: int = 2
    max_seconds: float = 7.0

    def __post_init__(self) -> None:
        if not LINE_CHARS[0] <= self.line_chars <= LINE_CHARS[1]:
            raise ValueError(f"a line holds {LINE_CHARS[0]} to {LINE_CHARS[1]} characters")
        if not LINES[0] <= self.lines <= LINES[1] or self.max_seconds <= 0:
            raise ValueError(f"a cue holds {LINES[0]} to {LINES[1]} lines, for some time")

    @classmethod
    def of(cls, line_chars: str | None, lines: str | None) -> CaptionStyle:
        """The style a request's fields ask (each None: the default's); ValueError for
        what is no whole number in its range."""
        asked = {}
        for name, value in (("line_chars", line_chars), ("lines", lines)):
            if value is not None:
                if not (value.strip().isascii() and value.strip().isdigit()):
                    raise ValueError(f"{value!r} is no whole number")
                asked[name] = int(value)
        return cls(**asked)

    @property
    def chars(self) -> int:
        return self.line_chars * self.lines


SUBTITLES = CaptionStyle()  # the default


@dataclass(frozen=True)
class Caption:
    """One cue: its times, its speaker and its lines."""

    start: float
    end: float
    speaker: str | None
    lines: tuple[str, ...]


def captions(finals: Iterable[Final], style: CaptionStyle = SUBTITLES) -> list[Caption]:
    """The cues of ``finals`` that hold words, in order."""
    cues: list[Caption] = []
    for final in finals:
        if not final.text.strip():
            continue
        if not final.words:
            lines = wrap(final.text.strip(), style.line_chars, style.lines)
            cues.append(Caption(final.start, final.end, final.speaker, lines))
            continue
        for run in _runs(final.words, final.speaker, style):
            text = " ".join(w.word for w in run)
            speaker = run[0].speaker or final.speaker
            start, end = max(run[0].start, final.start), min(run[-1].end, final.end)
            lines = wrap(text, style.line_chars, style.lines)
            cues.append(Caption(start, max(end, start), speaker, lines))
    return cues


def _runs(words: Sequence[Word], speaker: str | None, style: CaptionStyle) -> list[list[Word]]:
    """``words`` cut into the runs of one cue each."""
    runs: list[list[Word]] = []
    run: list[Word] = []
    length = 0
    sentences = _sentence_lengths(words)
    for word, sentence in zip(words, sentences, strict=True):
        longer = length + 1 + len(word.word) if run else len(word.word)
        if run and (
            (word.speaker or speaker) != (run[0].speaker or speaker)
            or longer > style.chars
            or word.end - run[0].start > style.max_seconds
            # a sentence that this cue cannot hold whole begins the next one
            or (ends_sentence(run[-1].word) and length + 1 + sentence > style.chars)
        ):
            runs.append(run)
            run, longer = [], len(word.word)
        run.append(word)
        length = longer
    if run:
        runs.append(run)
    return runs


def _sentence_lengths(words: Sequence[Word]) -> list[int]:
    """For each word, the characters from it to its sentence's end (or the last word)."""
    lengths = [0] * len(words)
    for i in range(len(words) - 1, -1, -1):
        word = words[i].word
        ends = ends_sentence(word) or i == len(words) - 1
        lengths[i] = len(word) + (0 if ends else 1 + lengths[i + 1])
    return lengths


def wrap(text: str, width: int, lines: int = 2) -> tuple[str, ...]:
    """``text`` on lines of at most ``width`` where its words allow: two lines are cut
    where they come out most even; more are filled greedily."""
    if len(text) <= width:
        return (text,)
    spaces = [i for i, ch in enumerate(text) if ch == " "]
    fitting = [i for i in spaces if i <= width and len(text) - i - 1 <= width]
    if lines == 2 and fitting:
        cut = min(fitting, key=lambda i: abs(len(text) - 2 * i - 1))
        return text[:cut], text[cut + 1 :]
    out: list[str] = []
    line = ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            out.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return (*out, line)
