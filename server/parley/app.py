"""Composition root of ``parley serve``: load the models, start the pipeline
(service.py) behind a websockets server, drain and shut down."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl
import threading
from dataclasses import dataclass

from websockets.asyncio.server import Server, serve

from parley.config import Settings
from parley.runtime.diarization import DiarizationWorker
from parley.runtime.metrics import Metrics
from parley.runtime.scheduler import AsrScheduler
from parley.service import Service, start_service
from parley.transport.admission import Access
from parley.transport.auth import ApiKeys, OriginPolicy, read_key_file
from parley.transport.ws_server import AsrService, StreamEndpoint

log = logging.getLogger(__name__)
# Headroom over max_frame_bytes, so an oversize frame reaches our own check and gets
# the documented error message; beyond this websockets itself closes with 1009.
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
    log.info("loading %s from %s on %s%s", asr.model, source, plan.description,
             f", assistant {asr.assistant}" if assistant else "")
    engine = WhisperEngine(
        source, asr.model, plan, assistant_source=assistant, assistant_label=asr.assistant,
        assistant_languages=frozenset(asr.assistant_languages)
        if asr.assistant_languages else None,
        max_draft=asr.max_draft, max_rows=asr.max_batch, cuda_graphs=asr.cuda_graphs)
    threads = asr_threads(settings)
    scheduler = AsrScheduler(engine, asr.queue_size, target_busy=asr.target_busy,
                             on_thread_start=lambda: set_threads(threads))
    return scheduler, AsrService(scheduler, settings.asr.model, engine.check_language)


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
    return DiarizationWorker(models, d.to_config(), capacity=2 * settings.server.max_sessions,
                             on_thread_start=lambda: set_threads(d.threads))


def access_of(settings: Settings) -> Access:
    """The API keys (PARLEY_TOKEN, the key file, PARLEY_API_KEYS) and allowed origins;
    ValueError on a malformed key file or a name given twice."""
    named: dict[str, str] = {}
    sources = [{"token": settings.token.get_secret_value()} if settings.token else {},
               read_key_file(settings.api_keys_file) if settings.api_keys_file else {},
               {n: v.get_secret_value() for n, v in settings.api_keys.items()}]
    for source in sources:
        for name, value in source.items():
            if name in named:
                raise ValueError(f"API key name {name!r} is given twice")
            named[name] = value
    return Access(ApiKeys.of(named), OriginPolicy.of(settings.server.allowed_origins))


def secrets_of(access: Access, settings: Settings) -> list[str]:
    """Every secret the process knows, for the log filter that redacts them."""
    others = (settings.webhooks.secret, settings.twilio.auth_token)
    return [*access.keys.values, os.environ.get("HF_TOKEN", ""),
            *(secret.get_secret_value() for secret in others if secret is not None)]


def tls_context(settings: Settings) -> ssl.SSLContext | None:
    server = settings.server
    if server.ssl_certfile is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(server.ssl_certfile, server.ssl_keyfile)
    return context


@dataclass
class RunningServer:
    """A started server: its address, and how to drain or stop it."""

    service: Service
    server: Server

    @property
    def port(self) -> int:
        return self.server.sockets[0].getsockname()[1]

    @property
    def endpoint(self) -> StreamEndpoint:
        return self.service.endpoint

    @property
    def metrics(self) -> Metrics:
        return self.service.metrics

    async def drain(self, timeout_s: float) -> None:
        """Finish every live session's audio (at most ``timeout_s``), then stop."""
        await self.endpoint.drain(timeout_s)
        await self.stop()

    async def stop(self) -> None:
        self.server.close(close_connections=False)
        await self.endpoint.shutdown()
        await self.server.wait_closed()
        await self.service.stop()


async def start_server(settings: Settings, worker: AsrScheduler, asr: AsrService,
                       diarization: DiarizationWorker | None = None,
                       warm_up: bool = True, access: Access | None = None) -> RunningServer:
    """Start the pipeline (timing the engine first, with ``warm_up``) and serve it
    (``access``: as read from ``settings`` when not given)."""
    service = await start_service(settings, worker, asr, access or access_of(settings),
                                  diarization, warm_up)
    server = await serve(
        service.handle,
        settings.server.host,
        settings.server.port,
        process_request=service.route,
        select_subprotocol=service.endpoint.select_subprotocol,
        max_size=settings.server.max_frame_bytes * FRAME_HARD_LIMIT_FACTOR,
        compression=None,  # audio does not compress; deflate would only cost CPU
        open_timeout=10,
        ssl=tls_context(settings),
    )
    return RunningServer(service, server)


async def in_passing_thread(function, *args):
    """Run blocking model work on a thread of its own that ends with it.

    torch leaves an OpenMP thread team on every thread that ran it with several
    threads; a pool thread would keep its team alive, and with more live OpenMP
    threads than cores libgomp stops spin-waiting, which made diarization steps 2.3
    times slower here. So only the model threads keep teams."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    def run() -> None:
        try:
            result = function(*args)
        except BaseException as exc:  # handed to the awaiting coroutine
            loop.call_soon_threadsafe(done.set_exception, exc)
        else:
            loop.call_soon_threadsafe(done.set_result, result)

    threading.Thread(target=run, name="parley-load", daemon=True).start()
    return await done


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
    print(f"Parley listening on {scheme}://{host}:{running.port}/v1/stream "
          f"(model {asr.model_label}, diarization {settings.diarization.source}; "
          f"also {others}; probes at /healthz and /readyz, metrics at /metrics)",
          flush=True)
    await stop.wait()
    log.info("shutting down: draining live sessions")
    await running.drain(settings.server.drain_timeout_s)
    log.info("stopped")
