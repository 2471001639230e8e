"""Subtitle cues (client/captions.py): finals cut into cues a viewer can read, by the
words' times; and the cue sizes asked over HTTP (OpenAI's form with Parley's
``max_line_width`` and ``max_line_count``, AssemblyAI's ``chars_per_caption``) on a real
server (fake engine) on loopback."""

from __future__ import annotations

import io
import re
import wave

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import pcm16
from parley.client.captions import SUBTITLES, CaptionStyle, captions, wrap
from parley.protocol.messages import Final, FinalReason, Word

KEY = "captions-key-42"


def final_of(words: list[tuple[str, float, float]], speaker: str | None = "S1") -> Final:
    timed = [Word(w, start, end, 0.9, speaker) for w, start, end in words]
    return Final(
        segment_id=1,
        start=timed[0].start if timed else 0.0,
        end=timed[-1].end if timed else 1.0,
        text=" ".join(w.word for w in timed),
        reason=FinalReason.SILENCE,
        speaker=speaker,
        words=timed,
    )


def spaced(text: str, start: float = 0.0, step: float = 0.3) -> list[tuple[str, float, float]]:
    return [
        (w, start + i * step, start + i * step + step * 0.8) for i, w in enumerate(text.split())
    ]


def test_a_long_final_becomes_cues_of_two_short_lines():
    said = (
        "So the first thing we did was move the whole build onto the new runners, "
        "and the second was to stop caching the dependencies between the branches"
    )
    final = final_of(spaced(said))
    cues = captions([final])
    assert len(cues) > 1
    assert " ".join(" ".join(c.lines) for c in cues) == said  # every word, in order
    for cue in cues:
        assert len(cue.lines) <= 2 and all(len(line) <= 42 for line in cue.lines)
        assert cue.end - cue.start <= 7.0 and cue.speaker == "S1"
    assert cues[0].start == final.words[0].start and cues[-1].end == final.words[-1].end


def test_a_sentence_the_cue_cannot_hold_begins_the_next_cue():
    said = (
        "Hello there. This sentence is much too long to share a cue with the short one "
        "said before it."
    )
    first, second = captions([final_of(spaced(said))])[:2]
    assert first.lines == ("Hello there.",)
    assert second.lines[0].startswith("This sentence")
    quoted = captions([final_of(spaced(said.replace("there.", 'there."')))])
    assert quoted[0].lines == ('Hello there."',)  # a sentence ends inside its quotes too
    # a short one that fits stays on the cue
    (only,) = captions([final_of(spaced("Hello there. Yes."))])
    assert only.lines == ("Hello there. Yes.",)


def test_a_change_of_speaker_within_a_final_begins_a_cue():
    words = [Word("Right.", 0.0, 0.4, 0.9, "S1"), Word("Exactly", 0.5, 0.9, 0.9, "S2")]
    final = Final(1, 0.0, 0.9, "Right. Exactly", FinalReason.SILENCE, speaker="S1", words=words)
    assert [(c.speaker, c.lines) for c in captions([final])] == [
        ("S1", ("Right.",)),
        ("S2", ("Exactly",)),
    ]


def test_a_final_without_words_is_one_cue_wrapped():
    final = Final(3, 1.0, 9.0, "a b " * 30, FinalReason.SILENCE)
    (cue,) = captions([final])
    assert (cue.start, cue.end) == (1.0, 9.0) and all(len(line) <= 42 for line in cue.lines)


def test_wrap_cuts_two_lines_evenly():
    assert wrap("one two three four five six seven eight nine ten eleven", 42) == (
        "one two three four five six",
        "seven eight nine ten eleven",
    )
    assert wrap("short", 42) == ("short",)


@given(
    st.lists(st.text("abcdefghij.,?", min_size=1, max_size=24), min_size=1, max_size=60),
    st.lists(st.floats(0.05, 2.0), min_size=60, max_size=60),
    st.integers(8, 60),
    st.integers(1, 3),
)
def test_any_words_become_cues_within_the_style(words, gaps, width, lines):
    """Whatever the words and their times: every word once, in order, on lines of at
    most ``width`` (a word longer than a line alone on its own), cues of at most the
    style's characters and seconds unless one word alone is longer."""
    style = CaptionStyle(line_chars=width, lines=lines)
    timed, now = [], 0.0
    for word, gap in zip(words, gaps, strict=False):
        timed.append((word, now, now + gap / 2))
        now += gap
    cues = captions([final_of(timed)], style)
    assert " ".join(" ".join(c.lines) for c in cues).split() == words
    for cue in cues:
        text = " ".join(cue.lines)
        if " " in text:  # more than one word
            assert len(text) <= style.chars and cue.end - cue.start <= style.max_seconds
        assert all(len(line) <= width or " " not in line for line in cue.lines)


def test_a_style_is_asked_in_range():
    assert CaptionStyle.of(None, None) == SUBTITLES
    assert CaptionStyle.of("32", "1") == CaptionStyle(line_chars=32, lines=1)
    for width, count in (("7", None), ("abc", None), (None, "0"), ("-3", "1"), ("42", "11")):
        with pytest.raises(ValueError):
            CaptionStyle.of(width, count)


@pytest.fixture(scope="module")
def talk_wav(talk) -> bytes:
    audio, _ = talk
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1), out.setsampwidth(2), out.setframerate(16000)
        out.writeframes(pcm16(audio))
    return buffer.getvalue()


def cue_lines(subtitles: str) -> list[str]:
    """The text lines of an SRT or WebVTT document (no numbers, times or header)."""
    return [
        line
        for line in subtitles.splitlines()
        if line and line != "WEBVTT" and not line.isdigit() and " --> " not in line
    ]


async def test_cue_sizes_asked_over_http(start, talk_wav):
    _, server = await start(token=KEY)
    auth = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{server.port}", headers=auth, timeout=60
    ) as http:
        words = (await http.post("/v1/audio/transcriptions", files={"file": talk_wav})).json()
        said = words["text"].split()
        for fmt in ("srt", "vtt"):
            answer = await http.post(
                "/v1/audio/transcriptions",
                files={"file": talk_wav},
                data={"response_format": fmt, "max_line_width": "20", "max_line_count": "1"},
            )
            lines = cue_lines(answer.text)
            assert " ".join(lines).split() == said
            assert all(len(line) <= 20 for line in lines), lines
            # the default: two lines of 42 a cue
            whole = await http.post(
                "/v1/audio/transcriptions", files={"file": talk_wav}, data={"response_format": fmt}
            )
            assert max(map(len, cue_lines(whole.text))) > 20
        refused = await http.post(
            "/v1/audio/transcriptions",
            files={"file": talk_wav},
            data={"response_format": "srt", "max_line_width": "wide"},
        )
        assert refused.status_code == 400
        assert refused.json()["error"]["param"] == "max_line_width"

        upload = (await http.post("/v2/upload", content=talk_wav)).json()["upload_url"]
        job = (await http.post("/v2/transcript", json={"audio_url": upload})).json()
        while job["status"] not in ("completed", "error"):
            job = (await http.get(f"/v2/transcript/{job['id']}")).json()
        srt = await http.get(f"/v2/transcript/{job['id']}/srt", params={"chars_per_caption": 16})
        lines = cue_lines(srt.text)
        assert " ".join(lines).split() == said and all(len(line) <= 16 for line in lines)
        assert len(re.findall(r" --> ", srt.text)) == len(lines)  # one line a caption
        bad = await http.get(f"/v2/transcript/{job['id']}/vtt", params={"chars_per_caption": 3})
        assert bad.status_code == 400 and "chars_per_caption" in bad.json()["error"]
