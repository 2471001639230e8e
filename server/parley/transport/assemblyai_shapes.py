"""AssemblyAI's pre-recorded API in its own shapes (protocol.md section 16): what a
``POST /v2/transcript`` body asks, as a ``FileRequest``, and a finished recording as
AssemblyAI's transcript object (pure).

AssemblyAI's words are timed in whole milliseconds, its speakers are letters (A, B, …)
and its utterances are a speaker's uninterrupted run of words. With ``multichannel`` (or
the older ``dual_channel``) each channel of the file is a recording of its own, and every
word and utterance names its channel (``assemblyai_channels``). ``punctuate`` and
``format_text`` default to true, as AssemblyAI's do; either false gives the bare words
(lower case, no punctuation). AssemblyAI transcribes English unless asked for another
``language_code`` or for ``language_detection``, and so does this.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from parley.client.captions import SUBTITLES, CaptionStyle
from parley.core.keyterms import check_keyterms
from parley.core.replacements import check_replacements
from parley.core.speaker_count import SpeakerCount
from parley.protocol.messages import Word
from parley.recordings.file_results import WHOLE, FileTranscript, Span
from parley.recordings.files import FileRequest
from parley.transport.assemblyai import speaker_letter
from parley.transport.assemblyai_channels import channel_of
from parley.transport.deepgram_groups import paragraph_runs, sentence_runs
from parley.transport.deepgram_query import bare
from parley.transport.upload_errors import UploadCode, UploadError

# AssemblyAI's PII policies that name what Parley redacts (core/redaction.py)
PII_POLICIES = {
    "credit_card_number": "pci",
    "credit_card_cvv": "pci",
    "credit_card_expiration": "pci",
    "us_social_security_number": "ssn",
    "phone_number": "phone",
}
SPOKEN_AMONG = "language_detection_options"
_UPLOAD_ID = re.compile(r"/v2/upload/([0-9a-f]{32})$")
_LANGUAGE = re.compile(r"^([a-z]{2,3})(_[a-z]{2,3})?$")
# The asked fields every answer repeats, as AssemblyAI's transcript object does.
ECHOED = (
    "audio_url",
    "language_code",
    "language_detection",
    "language_detection_options",
    "punctuate",
    "format_text",
    "speaker_labels",
    "speakers_expected",
    "keyterms_prompt",
    "prompt",
    "filter_profanity",
    "redact_pii",
    "redact_pii_policies",
    "disfluencies",
    "multichannel",
    "dual_channel",
    "audio_start_from",
    "audio_end_at",
    "webhook_url",
)


def _bad(message: str, param: str | None = None) -> UploadError:
    return UploadError(UploadCode.BAD_REQUEST, message, param)


def _flag(body: Mapping[str, Any], name: str, default: bool = False) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _bad(f"{name} must be true or false", name)
    return value


def _strings(body: Mapping[str, Any], name: str) -> list[str]:
    value = body.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(f"{name} must be a list of strings", name)
    return value


def _whole(value: object, name: str, least: int = 1, most: int = 64) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise _bad(f"{name} must be a whole number from {least} to {most}", name)
    return value


def caption_style(chars_per_caption: str | None) -> CaptionStyle:
    """The subtitles' cues: as Parley writes them (two lines of 42), or one line of at most
    ``chars_per_caption`` (AssemblyAI's query on ``…/srt`` and ``…/vtt``)."""
    if chars_per_caption is None:
        return SUBTITLES
    try:
        return CaptionStyle.of(chars_per_caption, "1")
    except ValueError as exc:
        raise _bad(f"chars_per_caption: {exc}", "chars_per_caption") from None


@dataclass(frozen=True)
class TranscriptAsk:
    """A transcript request: which upload, what of it, and how the answer is written."""

    upload_id: str
    job: FileRequest
    plain: bool  # bare words: punctuate or format_text false
    webhook_url: str | None
    echo: dict[str, Any]
    multichannel: bool = False  # each channel a recording of its own
    span: Span = WHOLE  # the part of the recording to transcribe

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> TranscriptAsk:
        """The request ``body`` asks for; UploadError (400) for what it cannot be."""
        audio_url = body.get("audio_url")
        found = _UPLOAD_ID.search(audio_url) if isinstance(audio_url, str) else None
        if found is None:
            raise _bad(
                "audio_url must be an upload_url this server gave (POST /v2/upload): "
                "Parley fetches no audio from URLs",
                "audio_url",
            )
        multichannel = _flag(body, "multichannel") or _flag(body, "dual_channel")
        start_ms = _whole(body.get("audio_start_from"), "audio_start_from", 0, 2**31) or 0
        end_ms = _whole(body.get("audio_end_at"), "audio_end_at", 0, 2**31)
        if end_ms is not None and end_ms <= start_ms:
            raise _bad("audio_end_at must come after audio_start_from", "audio_end_at")
        span = Span(start_ms / 1000, None if end_ms is None else end_ms / 1000)
        options, detection = (body.get(n) or {} for n in ("speaker_options", SPOKEN_AMONG))
        for name, value in (("speaker_options", options), (SPOKEN_AMONG, detection)):
            if not isinstance(value, Mapping):
                raise _bad(f"{name} must be an object", name)
        # the languages detection chooses among (AssemblyAI's expected_languages)
        expected = _strings(detection, "expected_languages") if _language(body) is None else []
        policies = _strings(body, "redact_pii_policies")
        redact = _flag(body, "redact_pii")
        unknown = sorted(set(policies) - set(PII_POLICIES))
        if redact and unknown:
            raise _bad(
                f"redact_pii_policies here are {', '.join(PII_POLICIES)}; not {', '.join(unknown)}",
                "redact_pii_policies",
            )
        spellings = body.get("custom_spelling") or []
        if not isinstance(spellings, list) or not all(
            isinstance(s, Mapping)
            and isinstance(s.get("to"), str)
            and isinstance(s.get("from"), list)
            and all(isinstance(f, str) for f in s["from"])
            for s in spellings
        ):
            raise _bad(
                "custom_spelling is a list of {from: [strings], to: string}", "custom_spelling"
            )
        prompt = body.get("prompt") or ""
        if not isinstance(prompt, str):
            raise _bad("prompt must be a string", "prompt")
        try:
            job = FileRequest(
                language=_language(body),
                diarize=_flag(body, "speaker_labels"),
                speakers=SpeakerCount(
                    _whole(body.get("speakers_expected"), "speakers_expected"),
                    _whole(options.get("min_speakers_expected"), "min_speakers_expected") or 1,
                    _whole(options.get("max_speakers_expected"), "max_speakers_expected"),
                ),
                prompt=prompt,
                keyterms=check_keyterms(
                    _strings(body, "keyterms_prompt") + _strings(body, "word_boost")
                ),
                redact=tuple(
                    sorted({PII_POLICIES[p] for p in policies or PII_POLICIES}) if redact else ()
                ),
                replace=check_replacements(
                    f"{find}:{s['to']}" for s in spellings for find in s["from"]
                ),
                filler_words=_flag(body, "disfluencies"),
                profanity_filter=_flag(body, "filter_profanity"),
                languages=tuple(expected),
            )
            _ = job.config  # every bound checked now, not when the job starts
        except ValueError as exc:
            raise _bad(str(exc)) from None
        webhook_url = body.get("webhook_url")
        if webhook_url is not None and not isinstance(webhook_url, str):
            raise _bad("webhook_url must be a string", "webhook_url")
        plain = not (_flag(body, "punctuate", True) and _flag(body, "format_text", True))
        echo = {name: body.get(name) for name in ECHOED}
        echo["language_code"] = body.get("language_code") or (job.language and "en_us")
        return cls(found.group(1), job, plain, webhook_url, echo, multichannel, span)


def _language(body: Mapping[str, Any]) -> str | None:
    """The spoken language: ``language_code``'s base (en_us → en), none with
    ``language_detection``, else English."""
    if _flag(body, "language_detection"):
        return None
    code = body.get("language_code") or "en"
    matched = _LANGUAGE.match(code.lower()) if isinstance(code, str) else None
    if matched is None:
        raise _bad(f"language_code {code!r} is not a language code (en_us, es, …)", "language_code")
    return matched.group(1)


def completed(result: FileTranscript, ask: TranscriptAsk, channels: int = 1) -> dict[str, Any]:
    """A finished recording's fields of the transcript object; ``channels``: how many
    ``result`` was heard on (``channel_labelled``), with ``multichannel``."""
    words = [_word(w, ask) for w in result.words]
    detected = [f.language_probability for f in result.finals if f.language_probability]
    utterances = ask.job.diarize or ask.multichannel  # AssemblyAI's turns, by either
    return {
        "text": (" ".join(w["text"] for w in words) if ask.plain else result.text),
        "words": words,
        "utterances": _utterances(result.words, ask) if utterances else None,
        "confidence": round(fmean(w["confidence"] for w in words), 3) if words else None,
        "audio_duration": round(result.duration),
        "language_code": result.language if ask.job.language is None else ask.echo["language_code"],
        "language_confidence": round(fmean(detected), 3) if detected else None,
        **({"audio_channels": channels} if ask.multichannel else {}),
    }


def _word(word: Word, ask: TranscriptAsk) -> dict[str, Any]:
    shaped = {
        "text": bare(word.word) if ask.plain else word.word.strip(),
        "start": round(word.start * 1000),
        "end": round(word.end * 1000),
        "confidence": round(word.probability, 3),
        "speaker": word.speaker if ask.multichannel else speaker_letter(word.speaker),
    }
    if ask.multichannel:
        shaped["channel"] = str(channel_of(word.speaker))
    return shaped


def _utterances(words: Sequence[Word], ask: TranscriptAsk) -> list[dict[str, Any]]:
    """Each speaker's uninterrupted runs of words (on several channels: each channel's
    speakers', in time order, as the words are)."""
    runs: list[list[Word]] = []
    for word in words:
        if runs and runs[-1][-1].speaker == word.speaker:
            runs[-1].append(word)
        else:
            runs.append([word])
    return [_run(run, ask) for run in runs]


MAX_SEARCHED = 100  # terms of one word search, each of at most MAX_SEARCHED characters


def word_search(result: FileTranscript, raw: str) -> dict[str, Any]:
    """``words`` (comma-separated words or phrases) found in the transcript, case and
    punctuation aside: each term's count, its matches' times (ms) and first words'
    indexes; UploadError past the bounds."""
    terms = [t.strip() for t in raw.split(",") if t.strip()]
    if not terms or len(terms) > MAX_SEARCHED or any(len(t) > MAX_SEARCHED for t in terms):
        raise _bad(
            f"words: 1 to {MAX_SEARCHED} comma-separated terms of at most {MAX_SEARCHED} "
            "characters",
            "words",
        )
    words = result.words
    spoken = [bare(w.word) for w in words]
    matches = []
    for term in terms:
        wanted = [bare(w) for w in term.split()]
        at = [
            i for i in range(len(spoken) - len(wanted) + 1) if spoken[i : i + len(wanted)] == wanted
        ]
        timestamps = [
            [round(words[i].start * 1000), round(words[i + len(wanted) - 1].end * 1000)] for i in at
        ]
        matches.append({"text": term, "count": len(at), "timestamps": timestamps, "indexes": at})
    return {"total_count": sum(m["count"] for m in matches), "matches": matches}


def sentences(result: FileTranscript, ask: TranscriptAsk) -> list[dict[str, Any]]:
    """The words cut into sentences (after . ? or !), none across paragraphs."""
    return [
        _run(sentence, ask)
        for words in _paragraph_words(result, ask)
        for sentence in sentence_runs(words)
    ]


def paragraphs(result: FileTranscript, ask: TranscriptAsk) -> list[dict[str, Any]]:
    """The words in paragraphs: a new one at each change of speaker (with
    ``speaker_labels``), or after a sentence and 2 s of silence, as Deepgram's are."""
    return [_run(words, ask) for words in _paragraph_words(result, ask)]


def _paragraph_words(result: FileTranscript, ask: TranscriptAsk) -> list[list[Word]]:
    runs = paragraph_runs(list(result.finals), ask.job.diarize or ask.multichannel)
    return [[w for f in run for w in f.words] for run in runs]


def _run(words: Sequence[Word], ask: TranscriptAsk) -> dict[str, Any]:
    """A run of words (an utterance, a sentence, a paragraph) as AssemblyAI gives one."""
    shaped = [_word(w, ask) for w in words]
    return {
        "speaker": shaped[0]["speaker"],
        **({"channel": shaped[0]["channel"]} if ask.multichannel else {}),
        "text": " ".join(w["text"] for w in shaped),
        "start": shaped[0]["start"],
        "end": shaped[-1]["end"],
        "confidence": round(fmean(w["confidence"] for w in shaped), 3),
        "words": shaped,
    }
