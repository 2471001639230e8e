"""The pipeline behind every front door: the started workers, the streaming endpoint and
the HTTP answers (probes, metrics, the browser page).

``parley serve`` puts it behind a websockets server (app.py); a Ray Serve replica puts
it behind an ASGI adapter (transport/asgi.py). Both hand it the same connections.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import cast

from starlette.routing import BaseRoute
from websockets.http11 import Request, Response

from parley.config import Settings
from parley.core.capacity import CapacityPolicy
from parley.core.costs import cost_report
from parley.protocol.paths import HEALTH_PATH, METRICS_PATH, READY_PATH
from parley.recordings.files import FileJobs, RecordingSpeakers
from parley.runtime.capacity import LiveCapacity
from parley.runtime.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from parley.runtime.metrics import Metrics
from parley.runtime.webhook_config import WebhookConfig
from parley.runtime.webhooks import WebhookSender
from parley.sessions.session_options import SessionOptions
from parley.sessions.streams import AsrService, StreamFactory
from parley.transport.admission import Access, Admission, StreamLimits
from parley.transport.auth import OriginPolicy
from parley.transport.connection import Connection
from parley.transport.dialects import all_dialects
from parley.transport.file_routes import FileRoutes
from parley.transport.followers import Followers
from parley.transport.front_door import FrontDoor
from parley.transport.http import StaticFiles, json_response, make_request_router, text_response
from parley.transport.key_watch import KeyWatch, watch_keys
from parley.transport.model_routes import ModelRoutes
from parley.transport.sinks import FollowerSinks, MetricsSinks, SinkFactory, WebhookSinks
from parley.transport.token_routes import RealtimeDefaults, TokenRoutes
from parley.transport.upload_body import UploadReceiver
from parley.transport.uploads import FileDoor
from parley.transport.ws_server import StreamEndpoint
from parley.workers.diarization import DiarizationWorker
from parley.workers.scheduler import AsrScheduler


def webhook_sender(settings: Settings, metrics: Metrics) -> WebhookSender | None:
    """The webhook sender the settings ask for; None when webhooks are off or have no secret."""
    hooks = settings.webhooks
    if not hooks.enabled or hooks.secret is None:
        return None
    config = WebhookConfig(
        hooks.url,
        hooks.secret.get_secret_value(),
        allowed_targets=tuple(hooks.allowed_targets),
        queue_size=hooks.queue_size,
        max_attempts=hooks.max_attempts,
    )
    return WebhookSender(config, lambda outcome: metrics.webhooks.labels(outcome).inc())


def _limits(settings: Settings, diarized: bool) -> StreamLimits:
    server = settings.server
    return StreamLimits(
        max_sessions=server.max_sessions,
        max_frame_bytes=server.max_frame_bytes,
        idle_timeout_s=server.idle_timeout_s,
        max_segment_s=settings.vad.max_segment_s,
        max_session_s=server.max_session_s,
        max_sessions_per_key=server.max_sessions_per_key,
        max_participants=server.max_participants,
        resume_window_s=server.resume_window_s,
        diarization_latency_s=settings.diarization.latency_s if diarized else None,
    )


def _routes(
    settings: Settings,
    asr: AsrService,
    endpoint: StreamEndpoint,
    metrics: Metrics,
    diarization: DiarizationWorker | None,
) -> dict:
    worker = asr.worker
    capacity = endpoint.capacity

    def readiness() -> dict:
        return {
            "asr_worker": worker.alive,
            "diarization_worker": diarization.alive if diarization else None,
            "draining": endpoint.draining,
            "at_capacity": capacity is not None and capacity.full(endpoint.load()),
        }

    def ready(checks: dict) -> bool:
        return (
            checks["asr_worker"]
            and checks["diarization_worker"] is not False
            and not checks["draining"]
            and not checks["at_capacity"]
        )

    def carried() -> float:
        """Real-time streams this replica carries (without labels; inf: not measured)."""
        return capacity.streams()["asr"] if capacity is not None else math.inf

    def readyz() -> Response:
        checks = readiness()
        if ready(checks):
            return json_response(HTTPStatus.OK, {"status": "ready", "checks": checks})
        return json_response(
            HTTPStatus.SERVICE_UNAVAILABLE, {"status": "not_ready", "checks": checks}
        )

    def health() -> Response:
        return json_response(
            HTTPStatus.OK,
            {
                "status": "ok",
                "model": asr.model_label,
                "sessions": endpoint.live_sessions,
                "draining": endpoint.draining,
                "asr_backlog": worker.backlog,
                "asr": {
                    "busy_fraction": round(worker.busy_fraction(), 3),
                    "partial_interval_s": round(
                        worker.partial_interval(settings.asr.partial_interval_s), 3
                    ),
                    **worker.stats.to_json(),
                    "costs": cost_report(worker.step_cost, worker.encoder_cost),
                },
                "capacity": (
                    {
                        "streams": {
                            k: v if math.isfinite(v) else None
                            for k, v in capacity.streams().items()
                        },
                        "live": vars(endpoint.load()),
                    }
                    if capacity is not None
                    else None
                ),
                "diarization": settings.diarization.source if diarization else None,
            },
        )

    metrics.watch("parley_ready", "1 while /readyz answers 200", lambda: float(ready(readiness())))
    metrics.watch("parley_draining", "1 while the server drains", lambda: float(endpoint.draining))
    metrics.capacity_streams.set_function(carried)
    metrics.capacity_used.set_function(lambda: endpoint.load().streams / carried())
    return {
        HEALTH_PATH: lambda: json_response(HTTPStatus.OK, {"status": "ok"}),
        READY_PATH: readyz,
        "/health": health,
        METRICS_PATH: lambda: text_response(HTTPStatus.OK, metrics.render(), METRICS_CONTENT_TYPE),
    }


@dataclass
class Service:
    """A started pipeline: what its front door hands connections and requests to, and
    how to drain or stop it."""

    endpoint: StreamEndpoint
    worker: AsrScheduler
    metrics: Metrics
    followers: Followers
    # the HTTP answer to a request, or None to let a WebSocket handshake through here
    route: Callable[[object, Request], Response | None]
    diarization: DiarizationWorker | None = None
    webhooks: WebhookSender | None = None
    webhook_grace_s: float = 10.0  # for deliveries still pending at the stop
    file_jobs: FileJobs | None = None
    routes: tuple[BaseRoute, ...] = ()  # HTTP: recordings, the model listing, tokens
    origins: OriginPolicy = OriginPolicy()  # the pages that may call the HTTP routes too
    keys: KeyWatch | None = None  # the key file's, while it serves

    def front_door(self) -> FrontDoor:
        """The one ASGI application serving this pipeline (its HTTP routes, and the
        rest)."""
        return FrontDoor(self, self.routes, self.endpoint.paths, self.origins)

    async def drain(self, timeout_s: float) -> None:
        """Admit nothing new; let live sessions and recordings finish (``timeout_s``)."""
        waits = [self.endpoint.drain(timeout_s)]
        if self.file_jobs is not None:
            waits.append(self.file_jobs.drain(timeout_s))
        await asyncio.gather(*waits)

    async def handle(self, connection: Connection) -> None:
        """A WebSocket connection: a session's followers, else a stream."""
        assert connection.request is not None  # the handshake is done
        if self.followers.matches(connection.request.path):
            await self.followers.handle(connection)
        else:
            await self.endpoint.handle(connection)

    async def stop(self) -> None:
        """End live sessions and recordings now (shutting_down) and stop the workers."""
        if self.keys is not None:
            await self.keys.stop()
        if self.file_jobs is not None:
            await self.file_jobs.drain(0.0)
        await self.endpoint.shutdown()
        await self.worker.stop()
        if self.diarization is not None:
            await self.diarization.stop()
        if self.webhooks is not None:
            await self.webhooks.stop(self.webhook_grace_s)


async def start_service(
    settings: Settings,
    worker: AsrScheduler,
    asr: AsrService,
    access: Access,
    diarization: DiarizationWorker | None = None,
    warm_up: bool = True,
    server_name: str | None = None,
) -> Service:
    """Start the workers (timing the engine first, with ``warm_up``) and build the
    endpoint and the HTTP answers (``server_name``: a cluster replica's, told to its
    sessions)."""
    await worker.start(warm_up=warm_up)
    metrics = Metrics()
    worker.observer = metrics  # after the warm-up, whose decodes are not traffic
    metrics.watch_asr(worker, settings.asr.partial_interval_s)
    if diarization is not None:
        diarization.on_step = metrics.diarization_step.observe
        diarization.start()
        if worker.threads is not None:  # no burst while finals wait for speaker steps
            worker.threads.held = lambda: diarization.urgent_waiting > 0
    capacity = None
    if settings.server.admit_by_capacity:  # after the warm-up: it starts from its timings
        capacity = LiveCapacity(
            worker,
            diarization,
            CapacityPolicy(settings.server.capacity_target_busy),
            settings.diarization.step_s if diarization else None,
        )
    options = SessionOptions(
        vad=settings.vad.to_config(),
        partial_interval_s=settings.asr.partial_interval_s,
        context_tokens=settings.asr.context_tokens,
        hypothesis_drafts=settings.asr.hypothesis_drafts,
        final_latency=metrics.final_latency.observe,
        audio_settled=capacity.settled if capacity else None,
    )
    webhooks = webhook_sender(settings, metrics)
    keys = watch_keys(access)
    if keys is not None:
        keys.start()
    if webhooks is not None:
        await webhooks.start()
    followers = Followers(access)
    # Where every session's messages go besides its client: the endpoint knows only this.
    sinks: list[SinkFactory] = [FollowerSinks(followers), MetricsSinks(metrics)]
    if webhooks is not None:
        sinks.append(WebhookSinks(webhooks))
    limits = _limits(settings, diarization is not None)
    admission = Admission(
        access,
        limits,
        asr.check_decoding,
        diarization is not None,
        webhooks.allows if webhooks is not None else lambda url: False,
        capacity,
    )
    endpoint = StreamEndpoint(
        asr,
        StreamFactory(worker, options, diarization),
        limits,
        admission,
        metrics,
        all_dialects(
            settings.vad.to_config(),
            settings.twilio.auth_token.get_secret_value() if settings.twilio.auth_token else None,
            settings.twilio.public_url,
            settings.wyoming.key,
        ),
        sinks,
        server_name,
        capacity,
    )
    route = make_request_router(
        _routes(settings, asr, endpoint, metrics, diarization),
        StaticFiles(settings.server.static_dir),
        endpoint.paths,
        followers.matches,
        endpoint.check_handshake,
    )
    jobs = file_jobs(settings, worker, diarization)
    receiver = UploadReceiver.within(
        jobs.limits, settings.server.idle_timeout_s, jobs.retry_after_s()
    )
    realtime = RealtimeDefaults(settings.vad.to_config(), asr.check_decoding, asr.model_label)
    door = FileDoor(
        jobs, access, metrics, asr.check_decoding, receiver, settings.server.max_sessions_per_key
    )
    return Service(
        endpoint,
        worker,
        metrics,
        followers,
        route,
        diarization,
        webhooks,
        file_jobs=jobs,
        routes=(
            *FileRoutes(door, asr.model_label, webhooks).routes(),
            *ModelRoutes(door, asr.model_label, created=int(time.time())).routes(),
            *TokenRoutes(access, time.time, realtime).routes(),
        ),
        origins=access.origins,
        keys=keys,
    )


def file_jobs(
    settings: Settings, worker: AsrScheduler, diarization: DiarizationWorker | None
) -> FileJobs:
    """The recordings' pipeline, on the same engine (and speaker models) as the streams."""
    from parley.core.recording_speakers import RecordingClustering

    return FileJobs(
        worker,
        settings.vad.to_config(),
        settings.files.to_limits(),
        # The loaded SpeakerModels, which also diarize whole recordings.
        speaker_models=cast(RecordingSpeakers, diarization.models) if diarization else None,
        diarization_config=diarization.config if diarization else None,
        clustering=RecordingClustering(),
        live_quiet=diarization.wait_quiet if diarization else None,
        speaker_priority=settings.diarization.nice,
        max_window_s=worker.engine.max_audio_s,
    )
