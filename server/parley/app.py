"""``parley serve``: load the models (loading.py), start the pipeline (service.py)
behind its one front door (transport/front_door.py) under uvicorn, drain and shut down."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass

import uvicorn

from parley.config import Settings
from parley.loading import access_of, load_asr, load_diarization
from parley.protocol.paths import STREAM_PATH
from parley.runtime.metrics import Metrics
from parley.service import Service, start_service
from parley.sessions.streams import AsrService
from parley.transport.admission import Access
from parley.transport.head_timeout import with_head_timeout
from parley.transport.ws_denial import RefusalEndsHandshake
from parley.transport.ws_server import StreamEndpoint
from parley.transport.wyoming import info_event
from parley.transport.wyoming_discovery import WyomingAdvert
from parley.transport.wyoming_listener import WyomingLimits, WyomingListener, networks_of
from parley.workers.diarization import DiarizationWorker
from parley.workers.scheduler import AsrScheduler
from parley.workers.threads import in_passing_thread

log = logging.getLogger(__name__)
# Headroom over max_frame_bytes, so an oversize frame reaches our own check and gets
# the documented error message; beyond this the WebSocket layer itself closes with 1009.
FRAME_HARD_LIMIT_FACTOR = 4


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
    wyoming: WyomingListener | None = None  # the Wyoming port's listener, if it is served
    wyoming_advert: WyomingAdvert | None = None  # its zeroconf advert, if it is advertised

    @property
    def port(self) -> int:
        """The port the server listens on (the one it chose, for port 0)."""
        return self.server.servers[0].sockets[0].getsockname()[1]

    @property
    def wyoming_port(self) -> int | None:
        """The Wyoming port (the one chosen, for port 0), if it is served."""
        return self.wyoming.port if self.wyoming is not None else None

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
        """End every live session now (shutting_down), stop the workers and the server."""
        if self.wyoming_advert is not None:
            advert, self.wyoming_advert = self.wyoming_advert, None  # withdrawn once
            await advert.close()
        if self.wyoming is not None:
            await self.wyoming.close()
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

    access = access or access_of(settings)
    service = await start_service(settings, worker, asr, access, diarization, warm_up)
    server = settings.server
    config = uvicorn.Config(
        service.front_door(),
        host=server.host,
        port=server.port,
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        http=with_head_timeout(server.idle_timeout_s),
        ws=RefusalEndsHandshake,
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
    running = RunningServer(service, uv, serving)
    wyoming = settings.wyoming
    if wyoming.port is not None:
        try:
            running.wyoming = await _listen_wyoming(settings, service, asr, access)
            if wyoming.zeroconf is not None:
                host, port = wyoming.host or server.host, running.wyoming_port
                running.wyoming_advert = await WyomingAdvert.started(
                    wyoming.zeroconf, host, port or 0
                )
        except (OSError, ValueError):
            await running.stop()
            raise
    return running


async def _listen_wyoming(
    settings: Settings, service: Service, asr: AsrService, access: Access
) -> WyomingListener:
    """The Wyoming port's listener (protocol.md section 10c)."""
    wyoming, server = settings.wyoming, settings.server
    if access.keys.required and wyoming.key not in access.keys.names:
        raise ValueError(f"wyoming.key {wyoming.key!r} names none of the server's API keys")
    limits = WyomingLimits(
        server.max_frame_bytes,
        server.idle_timeout_s,
        server.max_sessions,
        networks_of(wyoming.allowed_networks),
    )
    info = info_event(asr.model_label, asr.languages)
    listener = WyomingListener(service.endpoint, info, limits, service.metrics)
    assert wyoming.port is not None
    await listener.listen(wyoming.host or server.host, wyoming.port)
    return listener


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
    others = ", ".join(sorted(running.endpoint.paths - {STREAM_PATH}))
    if running.wyoming_port is not None:
        others += f"; Wyoming on tcp://{settings.wyoming.host or host}:{running.wyoming_port}"
    if (advert := running.wyoming_advert) is not None:
        others += f" (advertised as {advert.name} at {advert.address})"
    print(
        f"Parley listening on {scheme}://{host}:{running.port}/v1/stream "
        f"(model {asr.model_label}, diarization {settings.diarization.source}; "
        f"also {others}; recordings at POST /v1/audio/transcriptions, /v1/listen, "
        f"/predict and /v2/transcript; probes at /healthz and /readyz, metrics at /metrics)",
        flush=True,
    )
    await stop.wait()
    log.info("shutting down: draining live sessions")
    await running.drain(settings.server.drain_timeout_s)
    log.info("stopped")
