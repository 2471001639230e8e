"""Writing final results (the typed ``Final`` messages) as text, JSON, SRT, WebVTT, or
the speakers' turns as RTTM."""

from __future__ import annotations

import json

from parley.client.captions import SUBTITLES, Caption, CaptionStyle, captions
from parley.client.transcript import Transcript, rttm
from parley.protocol.messages import Final, as_json

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


def text_line(final: Final) -> str:
    """One final as a text line: its times, its speaker and its words."""
    return f"[{clock(final.start)} --> {clock(final.end)}] {_label(final.speaker)}{final.text}"


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
        return "".join(text_line(f) + "\n" for f in spoken)
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
