"""The recording endpoints, thin over ``FileDoor`` and ``file_answers``:

- ``POST /v1/audio/transcriptions``: OpenAI's file API (multipart);
- ``POST /v1/listen``: Deepgram's pre-recorded API (the audio as the body; with
  ``callback``, the answer is ``{"request_id"}`` and the result is POSTed there);
- ``POST /predict``: the reference handler's (multipart ``file`` + ``parameters`` JSON);
- AssemblyAI's uploads and transcript jobs (``assemblyai_files``).

Each answers errors in its own API's shape (protocol.md §"Recordings").
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import uuid
from dataclasses import asdict

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from parley.core.asr import Task
from parley.protocol.messages import ProtocolError
from parley.protocol.paths import LISTEN_PATH, PREDICT_PATH, TRANSCRIPTIONS_PATH, TRANSLATIONS_PATH
from parley.recordings.file_results import FileTranscript
from parley.recordings.files import FileRequest
from parley.runtime.webhooks import WebhookSender
from parley.transport import file_answers, openai_answers
from parley.transport.assemblyai_files import AssemblyFileRoutes
from parley.transport.deepgram_query import (
    TRUE,
    ListenVocabulary,
    listen_extra,
    listen_searches,
    listen_utt_split,
    recording_language,
    recording_raw,
)
from parley.transport.known_speakers import known_speakers
from parley.transport.predict_parameters import predict_decoding, predict_parameters, speaker_count
from parley.transport.upload_body import Form
from parley.transport.upload_errors import UploadCode, UploadError
from parley.transport.uploads import FileDoor

log = logging.getLogger(__name__)
OPENAI_FORMATS = ("json", "text", "srt", "vtt", "verbose_json", "diarized_json")
STREAMED = ("json", "text", "diarized_json")  # the others come whole: whisper-1 ignores stream


def _flag(value: str | None, default: bool = False) -> bool:
    return default if value is None else value.strip().lower() in TRUE


def _listed(form: Form, name: str) -> tuple[str, ...]:
    """A repeatable form field's values (``name`` or ``name[]``, as OpenAI's SDK sends a
    list), each also comma-separated, as the stream's query takes them."""
    values = form.all(name) + form.all(f"{name}[]")
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


class FileRoutes:
    """The recordings' HTTP endpoints (OpenAI's, Deepgram's, ``/predict``)."""

    def __init__(self, door: FileDoor, model_label: str, webhooks: WebhookSender | None = None):
        self._door = door
        self._model = model_label
        self._webhooks = webhooks
        self._callbacks: set[asyncio.Task] = set()

    def routes(self) -> list[Route]:
        """OpenAI's, Deepgram's, the reference handler's and AssemblyAI's file routes."""
        return [
            Route(TRANSCRIPTIONS_PATH, self.openai, methods=["POST"]),
            Route(TRANSLATIONS_PATH, self.openai_translation, methods=["POST"]),
            Route(LISTEN_PATH, self.deepgram, methods=["POST"]),
            Route(PREDICT_PATH, self.predict, methods=["POST"]),
            *AssemblyFileRoutes(self._door, self._webhooks).routes(),
        ]

    def _language(self, requested: str | None) -> str | None:
        return requested or ("en" if self._model.endswith(".en") else None)

    # ------------------------------------------------------------------ OpenAI

    async def openai_translation(self, request: Request) -> Response:
        """OpenAI's translations: the same form, English text out (diarization and
        streaming are transcription's)."""
        return await self.openai(request, Task.TRANSLATE)

    async def openai(self, request: Request, task: Task = Task.TRANSCRIBE) -> Response:
        """OpenAI's transcriptions or translations (``task``): protocol.md section 16."""
        async with contextlib.AsyncExitStack() as stack:
            try:
                key = self._door.authorize(request)
                form = await stack.enter_async_context(self._door.form(request, key))
                fmt = form.get("response_format") or "json"
                if fmt not in OPENAI_FORMATS:
                    raise UploadError(
                        UploadCode.BAD_REQUEST,
                        f"response_format must be one of {', '.join(OPENAI_FORMATS)}",
                        "response_format",
                    )
                granularities = openai_answers.granularities(form)
                diarize = fmt == "diarized_json" or _flag(form.get("diarize"))
                logprobs = "logprobs" in _listed(form, "include")  # with json, as OpenAI's
                style = openai_answers.caption_style(form)
                known = await known_speakers(form, diarize)
                if task is Task.TRANSLATE and (diarize or _flag(form.get("stream"))):
                    raise UploadError(
                        UploadCode.BAD_REQUEST,
                        "translations take json, text, srt, vtt or verbose_json, without stream",
                        "response_format",
                    )
                job = FileRequest(
                    language=form.get("language") or None,
                    languages=_listed(form, "languages"),
                    diarize=diarize,
                    prompt=form.get("prompt") or "",
                    task=task,
                    # Parley's own fields (an OpenAI client's extra_body), as on the stream
                    keyterms=_listed(form, "keyterms"),
                    redact=_listed(form, "redact"),
                    numerals=_flag(form.get("numerals")),
                    replace=_listed(form, "replace"),
                    filler_words=_flag(form.get("filler_words")),
                    profanity_filter=_flag(form.get("profanity_filter")),
                    dictation=_flag(form.get("dictation")),
                    known_speakers=known,
                )
                if _flag(form.get("stream")) and fmt in STREAMED:  # it takes the upload over
                    return await self._openai_stream(form.path, job, key, stack, diarize, logprobs)
                result = await self._door.transcribe(form.path, job, key)
            except UploadError as error:
                return openai_answers.openai_error(error)
        if fmt == "text":
            return PlainTextResponse(result.text + "\n")
        if fmt in ("srt", "vtt"):
            media_type = "text/vtt" if fmt == "vtt" else "text/plain"
            return PlainTextResponse(
                file_answers.rendered(result, fmt, style=style), media_type=media_type
            )
        if fmt == "verbose_json":
            return JSONResponse(
                openai_answers.openai_verbose(
                    result,
                    self._language(result.language),
                    task,
                    with_words="word" in granularities,
                    with_segments="segment" in granularities or "word" not in granularities,
                )
            )
        if fmt == "diarized_json":
            return JSONResponse(openai_answers.openai_diarized(result))
        return JSONResponse(openai_answers.openai_json(result, logprobs))

    async def _openai_stream(
        self,
        path,
        job: FileRequest,
        key: str,
        stack: contextlib.AsyncExitStack,
        diarized: bool,
        logprobs: bool,
    ) -> Response:
        """Server-sent events: a ``transcript.text.delta`` per window as its text and those
        before it are done, then (``diarized``) each segment with its speaker, then
        ``transcript.text.done`` (errors: an ``error`` event)."""
        deltas: asyncio.Queue[str | None] = asyncio.Queue()

        async def run() -> FileTranscript:
            try:
                return await self._door.transcribe(
                    path, job, key, on_text=lambda t: deltas.put_nowait(t)
                )
            finally:
                deltas.put_nowait(None)

        task = asyncio.ensure_future(run())
        lost = stack.pop_all()

        async def events():
            try:
                first = True
                while (text := await deltas.get()) is not None:
                    delta = text if first else " " + text
                    first = False
                    yield openai_answers.sse_event(
                        {"type": "transcript.text.delta", "delta": delta}
                    )
                try:
                    result = await task
                except UploadError as error:
                    yield openai_answers.sse_event(
                        {"type": "error", "error": openai_answers.openai_error_body(error)}
                    )
                    return
                for event in openai_answers.openai_stream_end(result, diarized, logprobs):
                    yield openai_answers.sse_event(event)
            finally:
                if not task.done():
                    task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await lost.aclose()

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
        )

    # ------------------------------------------------------------------ Deepgram

    async def deepgram(self, request: Request) -> Response:
        """Deepgram's pre-recorded ``POST /v1/listen``: protocol.md section 16."""
        request_id = str(uuid.uuid4())
        params = request.query_params
        diarize = _flag(params.get("diarize"))
        paragraphs = _flag(params.get("paragraphs"))  # punctuated, as Deepgram's are
        punctuate = paragraphs or any(
            _flag(params.get(name)) for name in ("punctuate", "smart_format", "dictation")
        )
        utterances = _flag(params.get("utterances"))
        multichannel = _flag(params.get("multichannel"))  # each channel a recording

        async def run(path, key) -> dict:
            digest = await asyncio.to_thread(_sha256, path)
            try:
                vocabulary = ListenVocabulary.of(params)
                language = recording_language(params)
                searches = listen_searches(params)
                extra = listen_extra(params)
                utt_split = listen_utt_split(params)
                raw = recording_raw(params)
            except ProtocolError as exc:
                raise UploadError(UploadCode.BAD_REQUEST, exc.message) from None
            # the vocabulary's fields are FileRequest's, by the same names
            job = FileRequest(language=language, diarize=diarize, **asdict(vocabulary))
            channels = await self._door.transcribe_channels(
                path, job, key, apart=multichannel, raw=raw
            )
            return file_answers.deepgram_response(
                channels,
                request_id,
                self._model,
                diarize=diarize,
                punctuate=punctuate,
                utterances=utterances,
                paragraphs=paragraphs,
                utt_split=utt_split,
                audio_sha256=digest,
                detected=job.language is None,
                search=searches,
                extra=extra,
            )

        try:
            key = self._door.authorize(request)
            if request.headers.get("content-type", "").startswith("application/json"):
                raise UploadError(
                    UploadCode.BAD_REQUEST,
                    "Parley does not fetch audio from "
                    "URLs: send the audio itself as the request body",
                )
            callback = params.get("callback")
            if callback:
                return await self._deepgram_callback(request, callback, request_id, key, run)
            async with self._door.body(request, key) as path:
                return JSONResponse(await run(path, key))
        except UploadError as error:
            return JSONResponse(
                file_answers.deepgram_error(error, request_id),
                status_code=error.status,
                headers=error.headers(),
            )

    async def _deepgram_callback(
        self, request: Request, callback: str, request_id: str, key: str, run
    ) -> Response:
        """Answer ``{"request_id"}`` once the upload is in, then POST the result (or the
        error) to ``callback``, signed as Parley's webhooks, only to allowed targets."""
        if self._webhooks is None or not self._webhooks.allows(callback):
            raise UploadError(
                UploadCode.BAD_REQUEST,
                "this server sends no callback to that URL (see webhooks.allowed_targets)",
                "callback",
            )
        stack = contextlib.AsyncExitStack()
        path = await stack.enter_async_context(self._door.body(request, key))
        webhooks = self._webhooks

        async def deliver() -> None:
            async with stack:
                try:
                    answer = await run(path, key)
                except UploadError as error:
                    answer = file_answers.deepgram_error(error, request_id)
            webhooks.send(callback, f"msg_{request_id}", json.dumps(answer))

        task = asyncio.ensure_future(deliver())
        self._callbacks.add(task)
        task.add_done_callback(self._callbacks.discard)
        return JSONResponse({"request_id": request_id})

    # ------------------------------------------------------------------ the reference handler

    async def predict(self, request: Request) -> Response:
        """The reference handler's ``POST /predict``: protocol.md section 16."""
        try:
            key = self._door.authorize(request)
            async with self._door.form(request, key) as form:
                parameters, warnings = predict_parameters(form.get("parameters"))
                count = speaker_count(
                    parameters.get("num_speakers"),
                    parameters.get("min_speakers"),
                    parameters.get("max_speakers"),
                )
                diarize = self._door.jobs.can_diarize
                job = FileRequest(
                    diarize=diarize,
                    speakers=count,
                    **predict_decoding(parameters),
                )
                result = await self._door.transcribe(form.path, job, key)
        except UploadError as error:
            return JSONResponse(
                {"detail": error.message, "error": error.code.value},
                status_code=error.status,
                headers=error.headers(),
            )
        return JSONResponse(file_answers.predict_response(result, diarize, parameters, warnings))


def _sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
