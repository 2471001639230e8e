"""Composition root: load the model, start its worker, serve, shut down cleanly."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from dataclasses import dataclass

from websockets.asyncio.server import Server, serve

from parley.config import Settings
from parley.runtime.scheduler import AsrScheduler
from parley.runtime.session import SessionOptions
from parley.transport.http import StaticFiles, make_request_router
from parley.transport.ws_server import AsrService, StreamEndpoint, StreamLimits

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
    from parley.core.speakers import ClusteringConfig
    from parley.models.device import plan_device, set_threads
    from parley.models.speaker_models import load_speaker_models
    from parley.runtime.diarization import DiarizationConfig, DiarizationWorker

    d = settings.diarization
    plan = plan_device(settings.asr.device)
    log.info("loading diarization models (%s) on %s", d.source, plan.description)
    models = load_speaker_models(d.source, settings.models_dir, plan.device)
    config = DiarizationConfig(
        window_s=d.window_s, step_s=d.step_s, latency_s=d.latency_s,
        clustering=ClusteringConfig(max_speakers=d.max_speakers,
                                    new_speaker_distance=d.new_speaker_distance))
    return DiarizationWorker(models, config, capacity=2 * settings.server.max_sessions,
                             on_thread_start=lambda: set_threads(d.threads))


@dataclass
class RunningServer:
    """A started server: its address, and how to stop it."""

    endpoint: StreamEndpoint
    worker: AsrScheduler
    server: Server
    diarization: object | None = None

    @property
    def port(self) -> int:
        return self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.server.close(close_connections=False)
        await self.endpoint.shutdown()
        await self.server.wait_closed()
        await self.worker.stop()
        if self.diarization is not None:
            await self.diarization.stop()


async def start_server(settings: Settings, worker: AsrScheduler, asr: AsrService,
                       diarization=None, warm_up: bool = True) -> RunningServer:
    """Start the workers (timing the engine first, with ``warm_up``) and serve."""
    await worker.start(warm_up=warm_up)
    if diarization is not None:
        diarization.start()
    limits = StreamLimits(
        max_sessions=settings.server.max_sessions,
        max_frame_bytes=settings.server.max_frame_bytes,
        idle_timeout_s=settings.server.idle_timeout_s,
        max_segment_s=settings.vad.max_segment_s,
        diarization_latency_s=settings.diarization.latency_s if diarization else None,
    )
    options = SessionOptions(vad=settings.vad.to_config(),
                             partial_interval_s=settings.asr.partial_interval_s,
                             context_tokens=settings.asr.context_tokens,
                             hypothesis_drafts=settings.asr.hypothesis_drafts)
    token = settings.token.get_secret_value() if settings.token else None
    endpoint = StreamEndpoint(asr, options, limits, token, diarization)

    def health() -> dict:
        return {"status": "ok", "model": asr.model_label, "sessions": endpoint.live_sessions,
                "asr_backlog": worker.backlog,
                "asr": {"busy_fraction": round(worker.busy_fraction(), 3),
                        "partial_interval_s": round(
                            worker.partial_interval(settings.asr.partial_interval_s), 3),
                        **worker.stats.to_json(), "costs": worker.costs()},
                "diarization": settings.diarization.source if diarization else None}

    server = await serve(
        endpoint.handle,
        settings.server.host,
        settings.server.port,
        process_request=make_request_router(health, StaticFiles(settings.server.static_dir)),
        max_size=settings.server.max_frame_bytes * FRAME_HARD_LIMIT_FACTOR,
        compression=None,  # audio does not compress; deflate would only cost CPU
        open_timeout=10,
    )
    return RunningServer(endpoint, worker, server, diarization)


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


async def serve_forever(settings: Settings) -> None:
    worker, asr = await in_passing_thread(load_asr, settings)
    diarization = await in_passing_thread(load_diarization, settings)
    running = await start_server(settings, worker, asr, diarization)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    host = settings.server.host
    print(f"Parley listening on ws://{host}:{running.port}/v1/stream "
          f"(model {asr.model_label}, diarization {settings.diarization.source}; "
          f"health at http://{host}:{running.port}/health)",
          flush=True)
    await stop.wait()
    log.info("shutting down")
    await running.stop()
