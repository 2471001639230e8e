"""AssemblyAI's pre-recorded API (protocol.md section 16), thin over ``FileDoor``: what
``assemblyai``'s ``Transcriber`` calls.

- ``POST /v2/upload``: the body is the recording; answered ``{"upload_url"}``;
- ``POST /v2/transcript``: a JSON request naming that upload; answered at once with the
  transcript object (``queued``), while its job waits for a slot as a recording's would
  be refused for one, then runs in the background;
- ``GET /v2/transcript/{id}``: the object, ``completed`` with its words (or ``error``);
  ``…/{id}/srt`` and ``…/{id}/vtt`` its subtitles, ``…/{id}/sentences`` and
  ``…/{id}/paragraphs`` its words so grouped, ``…/{id}/word-search`` where words were
  said; ``DELETE`` forgets it;
- ``GET /v2/transcript``: the key's transcripts, the newest first, a page at a time.

The key is offered as AssemblyAI's SDKs send it (the key itself as ``Authorization``)
or as on the other routes. Errors are AssemblyAI's ``{"error": message}``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from websockets.datastructures import Headers

from parley.protocol.paths import TRANSCRIPT_PATH, UPLOAD_PATH
from parley.runtime.webhooks import WebhookSender
from parley.transport.assemblyai import AssemblyAIDialect
from parley.transport.assemblyai_channels import channel_labelled
from parley.transport.assemblyai_jobs import AssemblyJobs, Status, TranscriptJob, job_json
from parley.transport.assemblyai_shapes import (
    TranscriptAsk,
    caption_style,
    paragraphs,
    sentences,
    word_search,
)
from parley.transport.file_answers import rendered
from parley.transport.json_body import json_object
from parley.transport.upload_errors import UploadCode, UploadError
from parley.transport.uploads import FileDoor

log = logging.getLogger(__name__)
MAX_REQUEST_BYTES = 65536  # a transcript request: its keyterms, spellings and prompt
REQUEST_TIMEOUT_S = 10.0  # for that request to arrive whole
SUBTITLES = {"srt": "application/x-subrip", "vtt": "text/vtt"}
GROUPS = {"sentences": sentences, "paragraphs": paragraphs}
MAX_LISTED = 200  # transcripts in one page of the listing


def _error(error: UploadError) -> Response:
    return JSONResponse({"error": error.message}, status_code=error.status, headers=error.headers())


class AssemblyFileRoutes:
    """AssemblyAI's uploads and transcript jobs, on one server's recording door."""

    def __init__(self, door: FileDoor, webhooks: WebhookSender | None = None):
        self._door = door
        self._webhooks = webhooks
        receiver = door.receiver
        # the uploads held may take the disk that uploads arriving at once may take
        self._jobs = AssemblyJobs(receiver.max_receiving * receiver.max_bytes)
        self._running: set[asyncio.Task] = set()

    def routes(self) -> list[Route]:
        return [
            Route(UPLOAD_PATH, self.upload, methods=["POST"]),
            Route(TRANSCRIPT_PATH, self.create, methods=["POST"]),
            Route(TRANSCRIPT_PATH, self.listing, methods=["GET"]),
            Route(TRANSCRIPT_PATH + "/{transcript_id}", self.transcript, methods=["GET", "DELETE"]),
            Route(TRANSCRIPT_PATH + "/{transcript_id}/{part}", self.part, methods=["GET"]),
        ]

    def _key(self, request: Request) -> str:
        headers = Headers(request.headers.items())
        offered = AssemblyAIDialect.offered_key(request.query_params, headers)
        return self._door.authorize(request, offered)

    async def upload(self, request: Request) -> Response:
        """The body, held for a transcript: ``{"upload_url"}``."""
        try:
            key = self._key(request)
            self._door.check_open()
            self._jobs.check_room(key)  # before the body is read
            async with self._door.receiver.body(request) as path:
                upload_id = self._jobs.hold(key, path)
        except UploadError as error:
            return _error(error)
        base = str(request.base_url).rstrip("/")
        return JSONResponse({"upload_url": f"{base}{UPLOAD_PATH}/{upload_id}"})

    async def create(self, request: Request) -> Response:
        """A transcript job on a held upload; the transcript object, ``queued``."""
        try:
            key = self._key(request)
            body = await json_object(
                request, MAX_REQUEST_BYTES, REQUEST_TIMEOUT_S, "a transcript request"
            )
            ask = TranscriptAsk.of(body)
            if ask.webhook_url is not None and not (
                self._webhooks is not None and self._webhooks.allows(ask.webhook_url)
            ):
                raise UploadError(
                    UploadCode.BAD_REQUEST,
                    "this server sends no webhook to that URL (see webhooks.allowed_targets)",
                    "webhook_url",
                )
            self._door.check_request(ask.job)
            self._door.check_open()
            job = self._jobs.add(key, ask)
        except UploadError as error:
            return _error(error)
        task = asyncio.ensure_future(self._run(job))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return JSONResponse(job_json(job))

    async def _run(self, job: TranscriptJob) -> None:
        """Wait for a slot (queued), transcribe (processing), then keep the outcome and
        tell the webhook."""
        door, result, error, channels = self._door, None, None, 1
        ask = job.ask
        try:
            while not door.jobs.draining and not door.could_start(job.key):
                await door.jobs.next_end()
            job.status = Status.PROCESSING
            heard = await door.transcribe_channels(
                job.upload.path, ask.job, job.key, apart=ask.multichannel, span=ask.span
            )
            channels = len(heard)
            result = channel_labelled(heard, ask.job.diarize) if ask.multichannel else heard[0]
        except UploadError as refused:
            error = refused.message
        except Exception:
            log.exception("an AssemblyAI transcript job failed")
            error = "the recording could not be transcribed"
        finally:
            self._jobs.finish(job, result, error, channels)
        if job.ask.webhook_url is not None and self._webhooks is not None:
            body = json.dumps({"transcript_id": job.id, "status": job.status})
            self._webhooks.send(job.ask.webhook_url, f"msg_{job.id}", body)

    async def transcript(self, request: Request) -> Response:
        """GET: the transcript object; DELETE: forget a finished one."""
        transcript_id = request.path_params["transcript_id"]
        try:
            key = self._key(request)
            if request.method == "DELETE":
                job = self._jobs.delete(key, transcript_id)
                return JSONResponse(job_json(job))
            job = self._jobs.get(key, transcript_id)
        except UploadError as error:
            return _error(error)
        return JSONResponse(job_json(job))

    async def listing(self, request: Request) -> Response:
        """The key's transcripts, the newest first: ``limit`` (1 to 200, default 10) a
        page, ``status`` of one kind only, ``before_id`` the page after that one's."""
        params = request.query_params
        try:
            key = self._key(request)
            limit = params.get("limit", "10")
            if not (limit.isascii() and limit.isdigit() and 1 <= int(limit) <= MAX_LISTED):
                raise UploadError(
                    UploadCode.BAD_REQUEST, f"limit is from 1 to {MAX_LISTED}", "limit"
                )
            status = params.get("status")
            if status is not None and status not in Status.ALL:
                raise UploadError(
                    UploadCode.BAD_REQUEST, f"status is one of {', '.join(Status.ALL)}", "status"
                )
            jobs = [t for t in self._jobs.of_key(key) if status in (None, t.status)]
            before = params.get("before_id")
            if before is not None:
                ids = [t.id for t in jobs]
                if before not in ids:
                    raise UploadError(UploadCode.BAD_REQUEST, "before_id is no transcript here")
                jobs = jobs[ids.index(before) + 1 :]
        except UploadError as error:
            return _error(error)
        page = jobs[: int(limit)]
        base = f"{str(request.base_url).rstrip('/')}{TRANSCRIPT_PATH}"
        following = {**params, "before_id": page[-1].id} if len(jobs) > len(page) else None
        return JSONResponse(
            {
                "page_details": {
                    "limit": int(limit),
                    "result_count": len(page),
                    "current_url": str(request.url),
                    "prev_url": None,
                    "next_url": f"{base}?{urlencode(following)}" if following else None,
                },
                "transcripts": [
                    {
                        "id": t.id,
                        "resource_url": f"{base}/{t.id}",
                        "status": t.status,
                        "created": t.created,
                        "completed": t.completed,
                        "audio_url": t.ask.echo["audio_url"],
                        "error": t.error,
                    }
                    for t in page
                ],
            }
        )

    async def part(self, request: Request) -> Response:
        """A completed transcript as SubRip or WebVTT, or its sentences or paragraphs."""
        part = request.path_params["part"]
        try:
            key = self._key(request)
            job = self._jobs.get(key, request.path_params["transcript_id"])
            if part not in SUBTITLES and part not in GROUPS and part != "word-search":
                raise UploadError(
                    UploadCode.NOT_FOUND,
                    f"{part} not found: srt, vtt, sentences, paragraphs and word-search are",
                )
            if job.result is None:
                raise UploadError(UploadCode.BAD_REQUEST, "the transcript is not completed")
            if part == "word-search":
                found = word_search(job.result, request.query_params.get("words", ""))
                return JSONResponse({"id": job.id, **found})
            style = caption_style(request.query_params.get("chars_per_caption"))
        except UploadError as error:
            return _error(error)
        if part in SUBTITLES:
            subtitles = rendered(job.result, part, style=style)
            return PlainTextResponse(subtitles, media_type=SUBTITLES[part])
        whole = job.answer
        assert whole is not None  # made with the result
        return JSONResponse(
            {
                part: GROUPS[part](job.result, job.ask),
                "id": job.id,
                "confidence": whole["confidence"],
                "audio_duration": whole["audio_duration"],
            }
        )
