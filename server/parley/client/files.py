"""Sending a recording to a Parley server's OpenAI-compatible file endpoint."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path

import httpx

from parley.client.captions import SUBTITLES, CaptionStyle
from parley.client.live import Unreachable


class UnreadableRecording(ValueError):
    """The server could not decode the recording (400 ``bad_audio``); the message says why."""


# `parley transcribe --url` formats, as the server's response_format.
REMOTE_FORMATS = {"text": "text", "srt": "srt", "vtt": "vtt", "json": "verbose_json"}


def transcribe_file(
    base_url: str,
    path: str | Path,
    fmt: str = "text",
    token: str | None = None,
    language: str | None = None,
    diarization: bool = False,
    timeout_s: float = 3600.0,
    decoding: dict | None = None,
    known_speakers: Sequence[tuple[str, Path]] = (),
    style: CaptionStyle = SUBTITLES,
) -> str:
    """POST ``path`` to ``base_url``/v1/audio/transcriptions (translations with
    ``task=translate``); the answer's body (JSON for ``json``: verbose_json with words).
    ``decoding``: ``parley stream``'s decoding options (keyterms, prompt, task, redact,
    numerals, replace, filler_words, profanity_filter, dictation), sent as the endpoint's fields;
    ``known_speakers``: (name, clip) of voices to label by name, sent as OpenAI's known
    speakers (the clips as data URLs); ``style``: srt and vtt cues, sent as Parley's
    ``max_line_width`` and ``max_line_count``. UnreadableRecording where the server could not
    decode it, RuntimeError with the server's message on any other error answer."""
    if fmt not in REMOTE_FORMATS:
        raise ValueError(f"--url formats are {', '.join(REMOTE_FORMATS)}")
    data: dict[str, str | list[str]] = {
        "response_format": REMOTE_FORMATS[fmt],
        "timestamp_granularities[]": "word",
    }
    if language:
        data["language"] = language
    if style != SUBTITLES:
        data["max_line_width"], data["max_line_count"] = str(style.line_chars), str(style.lines)
    if diarization:
        data["diarize"] = "true"
    decoding = decoding or {}
    for name in ("languages", "keyterms", "redact", "replace"):  # repeated fields
        if decoding.get(name):
            data[name] = list(decoding[name])
    if decoding.get("prompt"):
        data["prompt"] = decoding["prompt"]
    for name in ("numerals", "filler_words", "profanity_filter", "dictation"):
        if decoding.get(name):
            data[name] = "true"
    if known_speakers:
        data["known_speaker_names[]"] = [name for name, _ in known_speakers]
        data["known_speaker_references[]"] = [
            "data:application/octet-stream;base64," + base64.b64encode(clip.read_bytes()).decode()
            for _, clip in known_speakers
        ]
    endpoint = "translations" if decoding.get("task") == "translate" else "transcriptions"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = f"{base_url.rstrip('/')}/v1/audio/{endpoint}"
    with Path(path).open("rb") as file:
        try:
            response = httpx.post(
                url,
                files={"file": (Path(path).name, file)},
                data=data,
                headers=headers,
                timeout=timeout_s,
            )
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise Unreachable(url, exc) from exc
    if response.status_code != 200:
        try:
            error = response.json()["error"]
            message, code = error["message"], error.get("code")
        except (ValueError, KeyError, TypeError):
            message, code = response.text, None
        if code == "bad_audio":
            raise UnreadableRecording(message)
        raise RuntimeError(f"the server answered {response.status_code}: {message}")
    return response.text
