"""Writing final results (the typed ``Final`` messages) as text, JSON, SRT, WebVTT, or
the speakers' turns as RTTM."""

from __future__ import annotations

import itertools
import json

from parley.client.captions import SUBTITLES, Caption, CaptionStyle, captions
from parley.client.transcript import Transcript, rttm
from parley.protocol.messages import Final, Word, as_json

FORMATS = ("text", "json", "srt", "vtt", "rttm")


def clock(seconds: float, separator: str = ".") -> str:
    """HH:MM:SS.mmm (SRT wants a comma before the milliseconds)."""
    millis = int(round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, ms = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{ms:03d}"


def _label(speaker: str | None) -> str:
    return f"{speaker}: " if speaker else ""


def text_lines(final: Final) -> list[str]:
    """A final as timed text lines, one for each run of one speaker's words: a final
    can hold a change of turn that came without a pause (protocol.md, ``final``), and
    its own ``speaker`` names only who spoke most of it."""
    runs = _speaker_runs(final)
    if len(runs) == 1:  # its own text: the words may be fewer (none, for a recording's)
        return [
            f"[{clock(final.start)} --> {clock(final.end)}] {_label(final.speaker)}{final.text}"
        ]
    return [
        f"[{clock(start)} --> {clock(end)}] {_label(speaker)}{' '.join(w.word for w in words)}"
        for start, end, speaker, words in runs
    ]


def _speaker_runs(final: Final) -> list[tuple[float, float, str | None, list[Word]]]:
    """(start, end, speaker, words) of each run of one speaker's consecutive words; the
    first run begins where the final does and the last ends where it does."""
    runs = [
        (speaker, list(words))
        for speaker, words in itertools.groupby(final.words, lambda w: w.speaker or final.speaker)
    ]
    if not runs:
        return [(final.start, final.end, final.speaker, [])]
    return [
        (
            final.start if i == 0 else words[0].start,
            final.end if i == len(runs) - 1 else words[-1].end,
            speaker,
            words,
        )
        for i, (speaker, words) in enumerate(runs)
    ]


def _cue_text(cue: Caption) -> str:
    return _label(cue.speaker) + "\n".join(cue.lines)


def render(
    transcript: Transcript, fmt: str, uri: str = "stream", style: CaptionStyle = SUBTITLES
) -> str:
    """The finals (their speakers as the last ``speaker_update`` left them) in ``fmt``:
    ``srt`` and ``vtt`` as cues in ``style`` (client/captions.py); ``rttm`` writes the
    speakers' turns, named ``uri``."""
    finals = transcript.finals
    spoken = [f for f in finals if f.text.strip()]
    if fmt == "text":
        return "".join(line + "\n" for f in spoken for line in text_lines(f))
    if fmt == "json":
        keys = ("segment_id", "start", "end", "text", "reason", "speaker", "words")
        objects = [{k: data[k] for k in keys} for data in map(as_json, finals)]
        return json.dumps(objects, indent=2, ensure_ascii=False) + "\n"
    if fmt == "srt":
        blocks = [
            f"{i}\n{clock(c.start, ',')} --> {clock(c.end, ',')}\n{_cue_text(c)}\n"
            for i, c in enumerate(captions(spoken, style), 1)
        ]
        return "\n".join(blocks)
    if fmt == "vtt":
        cues = captions(spoken, style)
        blocks = [f"{clock(c.start)} --> {clock(c.end)}\n{_cue_text(c)}\n" for c in cues]
        return "WEBVTT\n\n" + "\n".join(blocks)
    if fmt == "rttm":
        return rttm(transcript.turns(), uri)
    raise ValueError(f"format must be one of {', '.join(FORMATS)}")
