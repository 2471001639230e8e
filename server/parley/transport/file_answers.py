"""A recording's transcript, and an upload's refusal, in the file APIs' own response
shapes (pure): text, subtitles and RTTM as the client writes them, Deepgram's and the
reference handler's; OpenAI's are openai_answers.py's.

Every shape is built from one ``FileTranscript``: its finals (one speaker's part of
one speech segment each, words with times) and its speakers. protocol.md §"Recordings"
gives each shape and what Parley leaves out of it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import Counter
from collections.abc import Sequence

from parley.client.captions import SUBTITLES, CaptionStyle
from parley.client.formats import render
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
from parley.transport.upload_errors import UploadError


def rendered(
    result: FileTranscript, fmt: str, uri: str = "recording", style: CaptionStyle = SUBTITLES
) -> str:
    """``text`` (timed lines), ``json``, ``srt``, ``vtt`` (cues in ``style``) or ``rttm``,
    as `parley stream` writes them."""
    return render(result.transcript(), fmt, uri, style)


def spoken_finals(result: FileTranscript) -> list[Final]:
    return [f for f in result.finals if f.text.strip()]


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

    spoken = [spoken_finals(result) for result in channels]
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
    finals = spoken_finals(result)
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
