"""A recording's transcript in OpenAI's shapes (``POST /v1/audio/transcriptions`` and
translations: json, verbose_json, diarized_json, the streamed events), what its form
asks beyond the shared fields (granularities, subtitle cues), and its refusals in
OpenAI's error shape (pure).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from starlette.responses import JSONResponse, Response

from parley.client.captions import CaptionStyle
from parley.core.asr import Task
from parley.protocol.messages import Final, Word
from parley.recordings.file_results import DecodeSigns, FileTranscript
from parley.transport.file_answers import spoken_finals
from parley.transport.upload_body import Form
from parley.transport.upload_errors import UploadCode, UploadError

MIN_PROBABILITY = 1e-10  # a word's log probability is never -inf
_OPENAI_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    429: "rate_limit_error",
    503: "server_error",
    500: "server_error",
}


def granularities(form: Form) -> set[str]:
    """OpenAI's ``timestamp_granularities[]`` (``word``, ``segment``); UploadError for
    another."""
    asked = set(form.all("timestamp_granularities[]") + form.all("timestamp_granularities"))
    if asked - {"word", "segment"}:
        raise UploadError(
            UploadCode.BAD_REQUEST,
            "timestamp_granularities are word and segment",
            "timestamp_granularities",
        )
    return asked


def caption_style(form: Form) -> CaptionStyle:
    """The subtitles' cues a form asks (Parley's ``max_line_width`` and ``max_line_count``,
    as openai-whisper's options are named); UploadError for a bad value."""
    try:
        return CaptionStyle.of(form.get("max_line_width"), form.get("max_line_count"))
    except ValueError as exc:
        raise UploadError(UploadCode.BAD_REQUEST, str(exc), "max_line_width") from None


def openai_json(result: FileTranscript, logprobs: bool = False) -> dict:
    """OpenAI's ``json`` answer: the text and the audio's duration as usage; with
    ``logprobs`` (``include[]=logprobs``) the words' log probabilities too."""
    answer: dict = {"text": result.text, "usage": _usage(result)}
    if logprobs:
        answer["logprobs"] = logprob_entries(result.words)
    return answer


def _usage(result: FileTranscript) -> dict:
    """What OpenAI bills a transcription by: the audio's seconds."""
    return {"type": "duration", "seconds": round(result.duration, 3)}


def logprob_entries(words: Sequence[Word]) -> list[dict]:
    """OpenAI's ``logprobs``: an entry a word, not a token (a word's probability is what
    Parley keeps), with its space before it as the text has it, and its UTF-8 bytes."""
    entries = []
    for index, word in enumerate(words):
        token = word.word if index == 0 else " " + word.word
        logprob = math.log(max(word.probability, MIN_PROBABILITY))
        entries.append(
            {"token": token, "logprob": round(logprob, 6), "bytes": list(token.encode())}
        )
    return entries


def openai_verbose(
    result: FileTranscript,
    language: str | None,
    task: Task,
    with_words: bool,
    with_segments: bool = True,
) -> dict:
    """``verbose_json``: ``language`` (a code) by its name, as OpenAI's; segments as
    Whisper's, each with its decode's signs (shared by a packed window's segments, as
    Whisper's window's are), the code of the language it was decoded in, its tokens not
    kept (empty) and its temperature (0 but where a doubted decode was drawn again, as
    Whisper's fallback draws); words when asked for."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    answer: dict = {
        "task": task.value,
        "language": LANGUAGES.get(language or "", language or "unknown"),
        "duration": round(result.duration, 3),
        "text": result.text,
        "usage": _usage(result),
    }
    if with_segments:
        answer["segments"] = [
            _verbose_segment(i, f, result.signs[f.segment_id])
            for i, f in enumerate(spoken_finals(result))
        ]
    if with_words:
        answer["words"] = [{"word": w.word, "start": w.start, "end": w.end} for w in result.words]
    return answer


def _verbose_segment(index: int, final: Final, signs: DecodeSigns) -> dict:
    return {
        "id": index,
        "seek": signs.seek,
        "start": final.start,
        "end": final.end,
        "text": " " + final.text,
        "tokens": [],
        "temperature": signs.temperature,
        "avg_logprob": round(signs.avg_logprob, 4),
        "compression_ratio": round(signs.compression_ratio, 4),
        "no_speech_prob": round(signs.no_speech_prob, 4),
        "language": final.language,
    }


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
            for i, f in enumerate(spoken_finals(result))
        ],
        "usage": {"type": "duration", "seconds": round(result.duration, 3)},
    }


def sse_event(data: dict) -> str:
    """One server-sent event of ``data`` (OpenAI's streamed transcription)."""
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def openai_stream_end(result: FileTranscript, diarized: bool, logprobs: bool = False) -> list[dict]:
    """The events that end a streamed transcription: with ``diarized_json``, each segment
    with its speaker (``transcript.text.segment``: speakers are known only once the whole
    recording is), then ``transcript.text.done`` (with ``logprobs``, the words')."""
    segments = openai_diarized(result)["segments"] if diarized else []
    done = {"type": "transcript.text.done", **openai_json(result, logprobs)}
    return [*segments, done]


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
