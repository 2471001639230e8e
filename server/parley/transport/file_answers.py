"""A recording's transcript, and an upload's refusal, in each file API's own response
shape (pure).

Every shape is built from one ``FileTranscript``: its finals (one speaker's part of
one speech segment each, words with times) and its speakers. protocol.md §"Recordings"
gives each shape and what Parley leaves out of it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections import Counter
from collections.abc import Sequence

from starlette.responses import JSONResponse, Response

from parley.client.captions import SUBTITLES, CaptionStyle
from parley.client.formats import render
from parley.client.transcript import Transcript
from parley.core.asr import Task
from parley.core.search import SearchWord
from parley.protocol.messages import Final
from parley.recordings.file_results import FileTranscript
from parley.transport.deepgram_groups import (
    UTT_SPLIT_S,
    deepgram_paragraphs,
    speaker_number,
    utterance_words,
)
from parley.transport.deepgram_query import bare, search_results
from parley.transport.upload_body import Form
from parley.transport.upload_errors import UploadCode, UploadError


def transcript_of(result: FileTranscript) -> Transcript:
    """The client library's transcript of the finals (for text, SRT, WebVTT, RTTM)."""
    transcript = Transcript()
    for final in result.finals:
        transcript.apply(final)
    return transcript


def rendered(
    result: FileTranscript, fmt: str, uri: str = "recording", style: CaptionStyle = SUBTITLES
) -> str:
    """``text`` (timed lines), ``json``, ``srt``, ``vtt`` (cues in ``style``) or ``rttm``,
    as `parley stream` writes them."""
    return render(transcript_of(result), fmt, uri, style)


def caption_style(form: Form) -> CaptionStyle:
    """The subtitles' cues a form asks (Parley's ``max_line_width`` and ``max_line_count``,
    as openai-whisper's options are named); UploadError for a bad value."""
    try:
        return CaptionStyle.of(form.get("max_line_width"), form.get("max_line_count"))
    except ValueError as exc:
        raise UploadError(UploadCode.BAD_REQUEST, str(exc), "max_line_width") from None


def _spoken(result: FileTranscript) -> list[Final]:
    return [f for f in result.finals if f.text.strip()]


# ------------------------------------------------------------------ OpenAI


def openai_json(result: FileTranscript) -> dict:
    """OpenAI's ``json`` answer: the text and the audio's duration as usage."""
    return {
        "text": result.text,
        "usage": {"type": "duration", "seconds": round(result.duration, 3)},
    }


def openai_verbose(
    result: FileTranscript,
    language: str | None,
    task: Task,
    with_words: bool,
    with_segments: bool = True,
) -> dict:
    """``verbose_json``: ``language`` (a code) by its name, as OpenAI's; segments as
    Whisper's (tokens and temperature are not kept: empty and 0), each with the code of
    the language it was decoded in; words when asked for."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    answer: dict = {
        "task": task.value,
        "language": LANGUAGES.get(language or "", language or "unknown"),
        "duration": round(result.duration, 3),
        "text": result.text,
        "usage": {"type": "duration", "seconds": round(result.duration, 3)},
    }
    if with_segments:
        answer["segments"] = [
            {
                "id": i,
                "seek": 0,
                "start": f.start,
                "end": f.end,
                "text": " " + f.text,
                "tokens": [],
                "temperature": 0.0,
                "avg_logprob": round(math.log(f.confidence), 4) if f.confidence else 0.0,
                "compression_ratio": 1.0,
                "no_speech_prob": 0.0,
                "language": f.language,
            }
            for i, f in enumerate(_spoken(result))
        ]
    if with_words:
        answer["words"] = [{"word": w.word, "start": w.start, "end": w.end} for w in result.words]
    return answer


def openai_diarized(result: FileTranscript) -> dict:
    """``diarized_json``, as OpenAI's diarizing model answers: segments with speakers."""
    return {
        "task": "transcribe",
        "duration": round(result.duration, 3),
        "text": result.text,
        "segments": [
            {
                "type": "transcript.text.segment",
                "id": f"seg_{i}",
                "start": f.start,
                "end": f.end,
                "text": f.text,
                "speaker": f.speaker or "S1",
            }
            for i, f in enumerate(_spoken(result))
        ],
        "usage": {"type": "duration", "seconds": round(result.duration, 3)},
    }


def sse_event(data: dict) -> str:
    """One server-sent event of ``data`` (OpenAI's streamed transcription)."""
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def openai_stream_end(result: FileTranscript, diarized: bool) -> list[dict]:
    """The events that end a streamed transcription: with ``diarized_json``, each segment
    with its speaker (``transcript.text.segment``: speakers are known only once the whole
    recording is), then ``transcript.text.done``."""
    segments = openai_diarized(result)["segments"] if diarized else []
    usage = {"type": "duration", "seconds": round(result.duration, 3)}
    return [*segments, {"type": "transcript.text.done", "text": result.text, "usage": usage}]


# ------------------------------------------------------------------ Deepgram


def deepgram_response(
    channels: Sequence[FileTranscript],
    request_id: str,
    model: str,
    *,
    diarize: bool,
    punctuate: bool,
    utterances: bool,
    audio_sha256: str,
    paragraphs: bool = False,
    utt_split: float = UTT_SPLIT_S,
    detected: bool = False,
    search: tuple[str, ...] = (),
    extra: tuple[tuple[str, str], ...] = (),
) -> dict:
    """Deepgram's pre-recorded response: a channel for each transcript (the file mixed to
    one, or each of its channels with ``multichannel``), one alternative each
    (``paragraphs``: with its words in paragraphs); ``search``: the queries looked for in
    its words; ``extra``: pairs told back in the metadata."""

    def word(w) -> dict:
        entry = {"word": bare(w.word), "start": w.start, "end": w.end, "confidence": w.probability}
        if punctuate:
            entry["punctuated_word"] = w.word
        if diarize:
            entry["speaker"] = speaker_number(w.speaker) or 0
            entry["speaker_confidence"] = 1.0
        return entry

    def text(final: Final) -> str:
        return final.text if punctuate else " ".join(bare(w.word) for w in final.words)

    def channel_of(finals: list[Final]) -> dict:
        words = [word(w) for f in finals for w in f.words]
        confidences = [w["confidence"] for w in words]
        alternative = {
            "transcript": " ".join(text(f) for f in finals),
            "confidence": round(sum(confidences) / len(confidences), 3) if confidences else 0.0,
            "words": words,
        }
        if paragraphs:
            alternative["paragraphs"] = deepgram_paragraphs(finals, diarize)
        languages = Counter(f.language for f in finals if f.language)
        channel: dict = {"alternatives": [alternative]}
        if search:
            heard = [SearchWord(w.word, w.start, w.end) for f in finals for w in f.words]
            channel["search"] = search_results(search, heard)
        if languages:
            alternative["languages"] = [code for code, _ in languages.most_common()]
            if detected:  # detect_language=true, or no language given
                channel["detected_language"] = languages.most_common(1)[0][0]
                probabilities = [
                    f.language_probability for f in finals if f.language_probability is not None
                ]
                if probabilities:
                    channel["language_confidence"] = round(
                        sum(probabilities) / len(probabilities), 3
                    )
        return channel

    spoken = [_spoken(result) for result in channels]
    model_id = hashlib.sha1(model.encode()).hexdigest()[:8]
    metadata = {
        "request_id": request_id,
        "sha256": audio_sha256,
        "created": dt.datetime.now(dt.UTC).isoformat(),
        "duration": round(max(result.duration for result in channels), 3),
        "channels": len(channels),
        "models": [model_id],
        "model_info": {model_id: {"name": model, "version": "parley", "arch": "whisper"}},
    }
    if extra:
        metadata["extra"] = dict(extra)
    results: dict = {"channels": [channel_of(finals) for finals in spoken]}
    if utterances:  # every channel's, in time order, each saying its channel
        runs = sorted(
            (
                (run, index)
                for index, finals in enumerate(spoken)
                for run in utterance_words(finals, diarize, utt_split)
            ),
            key=lambda item: (item[0][0].start, item[1]),
        )
        results["utterances"] = [
            {
                "id": f"{request_id}-{i}",
                "start": run[0].start,
                "end": run[-1].end,
                "channel": index,
                "confidence": round(sum(w.probability for w in run) / len(run), 3),
                "transcript": " ".join(w.word if punctuate else bare(w.word) for w in run),
                "words": [word(w) for w in run],
                **({"speaker": speaker_number(run[0].speaker) or 0} if diarize else {}),
            }
            for i, (run, index) in enumerate(runs)
        ]
    return {"metadata": metadata, "results": results}


# ------------------------------------------------------------------ the reference handler


def pyannote_label(label: str | None) -> str:
    """S1 → SPEAKER_00, the labels pyannote (and so the reference handler) gives."""
    number = speaker_number(label)
    return f"SPEAKER_{number or 0:02d}"


def predict_response(
    result: FileTranscript, diarized: bool, parameters: dict, warnings: list[str]
) -> dict:
    """``{"speakers", "chunks", "text"}`` as the reference handler answers (its
    ``speakers`` are its chunks, each with the speaker it falls in), plus ``parley``:
    what the scheduler chose and the parameters it was given."""
    finals = _spoken(result)
    chunks = [{"timestamp": [f.start, f.end], "text": " " + f.text} for f in finals]
    speakers = (
        [
            {
                "speaker": pyannote_label(f.speaker),
                "text": " " + f.text,
                "timestamp": [f.start, f.end],
            }
            for f in finals
        ]
        if diarized
        else []
    )
    return {
        "speakers": speakers,
        "chunks": chunks,
        "text": " " + result.text,
        "parley": {
            "decode": result.report.to_json(),
            "parameters": parameters,
            "warnings": warnings,
            "duration": round(result.duration, 3),
            "processing_s": round(result.processing_s, 3),
        },
    }


# ---------------------------------------------------------------- refusals


def deepgram_error(error: UploadError, request_id: str) -> dict:
    """An upload refused, as Deepgram's pre-recorded API answers it."""
    return {
        "err_code": error.code.value.upper(),
        "err_msg": error.message,
        "request_id": request_id,
    }


_OPENAI_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    429: "rate_limit_error",
    503: "server_error",
    500: "server_error",
}


def openai_error_body(error: UploadError) -> dict:
    """An upload refused, as OpenAI's error object (also a stream's error event)."""
    return {
        "message": error.message,
        "type": _OPENAI_TYPES.get(error.status, "invalid_request_error"),
        "param": error.param,
        "code": error.code.value,
    }


def openai_error(error: UploadError) -> Response:
    """An upload refused, as OpenAI's API answers it."""
    return JSONResponse(
        {"error": openai_error_body(error)}, status_code=error.status, headers=error.headers()
    )
