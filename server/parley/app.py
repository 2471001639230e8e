"""Composition root of ``parley serve``: load the models, start the pipeline
(service.py) behind its one front door (transport/front_door.py, under uvicorn), drain
and shut down."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from dataclasses import dataclass

import uvicorn

from parley.config import Settings
from parley.runtime.diarization import DiarizationWorker
from parley.runtime.metrics import Metrics
from parley.runtime.scheduler import AsrScheduler
from parley.runtime.streams import AsrService
from parley.runtime.threads import in_passing_thread
from parley.service import Service, start_service
from parley.transport.admission import Access
from parley.transport.auth import ApiKeys, OriginPolicy, read_key_file
from parley.transport.ws_server import StreamEndpoint

log = logging.getLogger(__name__)
# Headroom over max_frame_bytes, so an oversize frame reaches our own check and gets
# the documented error message; beyond this the WebSocket layer itself closes with 1009.
FRAME_HARD_LIMIT_FACTOR = 4


def load_asr(settings: Settings) -> tuple[AsrScheduler, AsrService]:
    """Load the engine (slow, blocking: call it off the event loop)."""
    from parley.models.bundle import resolve_model
    from parley.models.device import plan_device, set_threads
    from parley.models.whisper_engine import WhisperEngine

    plan = plan_device(settings.asr.device)
    asr = settings.asr
    source = resolve_model(asr.model, settings.models_dir)
    assistant = resolve_model(asr.assistant, settings.models_dir) if asr.assistant else None
    log.info(
        "loading %s from %s on %s%s",
        asr.model,
        source,
        plan.description,
        f", assistant {asr.assistant}" if assistant else "",
    )
    engine = WhisperEngine(
        source,
        asr.model,
        plan,
        assistant_source=assistant,
        assistant_label=asr.assistant,
        assistant_languages=frozenset(asr.assistant_languages) if asr.assistant_languages else None,
        max_draft=asr.max_draft,
        max_rows=asr.max_batch,
        cuda_graphs=asr.cuda_graphs,
    )
    threads = asr_threads(settings)
    scheduler = AsrScheduler(
        engine,
        asr.queue_size,
        target_busy=asr.target_busy,
        on_thread_start=lambda: set_threads(threads),
    )
    return scheduler, AsrService(scheduler, settings.asr.model)


def asr_threads(settings: Settings) -> int | None:
    """The ASR thread's torch threads: as configured; else, with diarization on, the cores
    its thread leaves free, because two model threads busy on the same cores slow each
    other down (4 diarized streams here: final latency p50 3.0 s with the ASR on both
    cores, 1.2 s with it on one); else torch's default (None)."""
    from parley.models.device import DEFAULT_THREADS

    if settings.asr.threads or not settings.diarization.enabled:
        return settings.asr.threads
    return max(1, DEFAULT_THREADS - settings.diarization.threads)


def load_diarization(settings: Settings):
    """The diarization worker, or None when it is off (then pyannote is never imported)."""
    if not settings.diarization.enabled:
        return None
    from parley.models.device import plan_device, set_threads
    from parley.models.speaker_models import load_speaker_models

    d = settings.diarization
    plan = plan_device(settings.asr.device)
    log.info("loading diarization models (%s) on %s", d.source, plan.description)
    models = load_speaker_models(d.source, settings.models_dir, plan.device)
    return DiarizationWorker(
        models,
        d.to_config(),
        capacity=2 * settings.server.max_sessions,
        on_thread_start=lambda: set_threads(d.threads),
    )


def access_of(settings: Settings) -> Access:
    """The API keys (PARLEY_TOKEN, the key file, PARLEY_API_KEYS) and allowed origins;
    ValueError on a malformed key file or a name given twice."""
    named: dict[str, str] = {}
    sources = [
        {"token": settings.token.get_secret_value()} if settings.token else {},
        read_key_file(settings.api_keys_file) if settings.api_keys_file else {},
        {n: v.get_secret_value() for n, v in settings.api_keys.items()},
    ]
    for source in sources:
        for name, value in source.items():
            if name in named:
                raise ValueError(f"API key name {name!r} is given twice")
            named[name] = value
    return Access(ApiKeys.of(named), OriginPolicy.of(settings.server.allowed_origins))


def secrets_of(access: Access, settings: Settings) -> list[str]:
    """Every secret the process knows, for the log filter that redacts them."""
    others = (settings.webhooks.secret, settings.twilio.auth_token)
    return [
        *access.keys.values,
        os.environ.get("HF_TOKEN", ""),
        *(secret.get_secret_value() for secret in others if secret is not None),
    ]


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: ``serve_forever`` drains on signals."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


@dataclass
class RunningServer:
    """A started server: its address, and how to drain or stop it."""

    service: Service
    server: uvicorn.Server
    serving: asyncio.Task

    @property
    def port(self) -> int:
        return self.server.servers[0].sockets[0].getsockname()[1]

    @property
    def endpoint(self) -> StreamEndpoint:
        return self.service.endpoint

    @property
    def metrics(self) -> Metrics:
        return self.service.metrics

    async def drain(self, timeout_s: float) -> None:
        """Finish every live session's audio and every recording (at most ``timeout_s``),
        then stop."""
        await self.service.drain(timeout_s)
        await self.stop()

    async def stop(self) -> None:
        await self.endpoint.shutdown()
        await self.service.stop()
        self.server.should_exit = True
        await self.serving


async def start_server(
    settings: Settings,
    worker: AsrScheduler,
    asr: AsrService,
    diarization: DiarizationWorker | None = None,
    warm_up: bool = True,
    access: Access | None = None,
) -> RunningServer:
    """Start the pipeline (timing the engine first, with ``warm_up``) and serve it
    (``access``: as read from ``settings`` when not given)."""
    from parley.transport.front_door import FrontDoor

    service = await start_service(
        settings, worker, asr, access or access_of(settings), diarization, warm_up
    )
    server = settings.server
    config = uvicorn.Config(
        FrontDoor(service),
        host=server.host,
        port=server.port,
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        ws_max_size=server.max_frame_bytes * FRAME_HARD_LIMIT_FACTOR,
        ws_per_message_deflate=False,  # audio does not compress; deflate would only cost CPU
        ssl_certfile=server.ssl_certfile,
        ssl_keyfile=server.ssl_keyfile,
        timeout_graceful_shutdown=1,
    )
    uv = _Uvicorn(config)
    serving = asyncio.ensure_future(uv.serve())
    while not uv.started:
        if serving.done():  # it could not bind, or failed to start
            await service.stop()
            serving.result()
            raise RuntimeError(f"could not listen on {server.host}:{server.port}")
        await asyncio.sleep(0.01)
    return RunningServer(service, uv, serving)


async def serve_forever(settings: Settings, access: Access) -> None:
    """Serve until SIGTERM or SIGINT, then drain: live sessions get the finals of all
    their audio (for at most ``server.drain_timeout_s``). A second signal ends them now."""
    worker, asr = await in_passing_thread(load_asr, settings)
    diarization = await in_passing_thread(load_diarization, settings)
    running = await start_server(settings, worker, asr, diarization, access=access)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    cut_short: list[asyncio.Task] = []

    def on_signal() -> None:
        if stop.is_set() and not cut_short:
            log.info("second signal: ending live sessions now")
            cut_short.append(asyncio.ensure_future(running.endpoint.shutdown()))
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    host = settings.server.host
    scheme = "wss" if settings.server.ssl_certfile else "ws"
    others = ", ".join(sorted(running.endpoint.paths - {"/v1/stream"}))
    print(
        f"Parley listening on {scheme}://{host}:{running.port}/v1/stream "
        f"(model {asr.model_label}, diarization {settings.diarization.source}; "
        f"also {others}; recordings at POST /v1/audio/transcriptions, /v1/listen and "
        f"/predict; probes at /healthz and /readyz, metrics at /metrics)",
        flush=True,
    )
    await stop.wait()
    log.info("shutting down: draining live sessions")
    await running.drain(settings.server.drain_timeout_s)
    log.info("stopped")
