"""``parley cluster``: start (or join) a Ray cluster and serve Parley on it, in the
foreground, until Ctrl-C or SIGTERM; then drain every replica and stop."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

from parley.config import Settings

APP_NAME = "parley"
# Serve's controller kills a proxy that is not ready within 5 s of starting, and
# serve.start then fails on the killed one: a proxy can take longer to import on a
# busy two-core machine. Read by the Ray processes this one starts (a joined cluster
# keeps its own setting).
PROXY_READY_ENV = {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "30"}


def start(settings: Settings, load=None) -> float:
    """Connect to (or start) Ray, start Serve's proxy and deploy the application; the
    seconds it took until every replica was ready."""
    import ray
    from ray import serve

    from parley.cluster.deployment import application

    cluster = settings.cluster
    began = time.perf_counter()
    if not ray.is_initialized():
        for name, value in PROXY_READY_ENV.items():
            os.environ.setdefault(name, value)
        ray.init(address=cluster.address, include_dashboard=False, logging_level=logging.WARNING)
    serve.start(
        proxy_location=cluster.proxy_location,
        http_options={"host": cluster.host, "port": cluster.port},
    )
    serve.run(application(settings, load), name=APP_NAME, route_prefix="/")
    return time.perf_counter() - began


def stop() -> None:
    """Stop the application, then Serve: its proxies carry the drained sessions' last
    messages, so they stop only once every replica has drained."""
    from ray import serve

    serve.delete(APP_NAME)
    serve.shutdown()


def serve_cluster(settings: Settings) -> None:
    """`parley cluster`: start, say where it serves, wait for Ctrl-C or SIGTERM (a second
    one stops at once), then drain and stop."""
    import ray

    stopping = threading.Event()

    def on_signal(signum, frame) -> None:
        if stopping.is_set():
            raise KeyboardInterrupt  # a second signal: stop now
        stopping.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        took = start(settings)
        cluster = settings.cluster
        print(
            f"Parley cluster listening on ws://{cluster.host}:{cluster.port}/v1/stream "
            f"(ready in {took:.1f} s, {cluster.replicas} replica(s) of {settings.asr.model}; "
            f"the page at http://{cluster.host}:{cluster.port}/; Ctrl-C stops it)",
            flush=True,
        )
        while not stopping.wait(0.5):
            pass
        print("draining the replicas' sessions, then stopping", flush=True)
        stop()
    finally:
        ray.shutdown()
