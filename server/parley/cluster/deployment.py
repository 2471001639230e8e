"""Parley as a Ray Serve application: each replica is one whole server.

A replica loads one model (on its own GPU when ``cluster.num_gpus`` is 1), runs the
same pipeline as ``parley serve`` (service.py) and serves it through the ASGI adapter.
A WebSocket is one long request pinned to one replica, so a session stays where it
started; ``max_ongoing_requests`` is the replica's session cap
(``server.max_sessions``), and the autoscaler follows ongoing sessions.

Ray Serve stops a replica (downscale, redeploy, ``serve.shutdown``) by waiting for its
ongoing requests to end, and kills it after ``graceful_shutdown_timeout_s``. A session
never ends on its own, so each replica watches for its stop and drains, as on SIGTERM:
every live session gets the finals of all the audio it sent, then ``session_ended``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import ray
from ray import serve

from parley.config import Settings
from parley.loading import access_of, load_asr, load_diarization
from parley.service import Service, start_service
from parley.sessions.streams import AsrService
from parley.transport.front_door import FrontDoor
from parley.workers.scheduler import AsrScheduler
from parley.workers.threads import in_passing_thread

log = logging.getLogger(__name__)

AsrLoader = Callable[[Settings], tuple[AsrScheduler, AsrService]]
# Ray's force-kill comes this long after the drain's own timeout: room for the last
# finals to be sent and the connections closed.
DRAIN_MARGIN_S = 5.0
STOP_POLL_S = 0.2
# Read from each replica's own environment, never passed through Ray (whose deployment
# configs are stored in its control store and shown on its dashboard).
SECRET_FIELDS: dict[str, Any] = {
    "token": True,
    "api_keys": True,
    "webhooks": {"secret"},
    "twilio": {"auth_token"},
}


def replica_is_stopping() -> bool:
    """Whether Ray Serve has begun stopping this replica.

    Ray Serve tells user code nothing before it waits for ongoing requests to end, and
    a streaming session never ends by itself; so we read the flag its replica sets when
    the stop begins (Ray 2.60, the version pyproject.toml pins;
    tests/test_cluster.py fails if it moves)."""
    from ray._private.worker import global_worker

    actor = global_worker.actors.get(global_worker.actor_id)
    return bool(getattr(getattr(actor, "_replica_impl", None), "_shutting_down", False))


def replica_settings(settings: Settings) -> dict:
    """The settings a replica is built with: all but the secrets."""
    return settings.model_dump(mode="json", exclude=SECRET_FIELDS)


@serve.deployment(name="parley")
@serve.ingress()
class ParleyReplica:
    """One Ray Serve replica: a whole Parley server (workers, endpoint, front door)."""

    async def __init__(self, settings: dict, load: AsrLoader | None = None):  # type: ignore[misc]  # Ray Serve awaits an async constructor
        # The secrets come from this process's environment (PARLEY_*), as on a server.
        self._settings = Settings(**settings)
        worker, asr = await in_passing_thread(load or load_asr, self._settings)
        diarization = await in_passing_thread(load_diarization, self._settings)
        context = serve.get_replica_context()
        name = f"{ray.get_runtime_context().get_node_id()[:12]}/{context.replica_tag}"
        self._service: Service = await start_service(
            self._settings, worker, asr, access_of(self._settings), diarization, server_name=name
        )
        self._watch = asyncio.ensure_future(self._drain_when_stopping())
        log.info("replica %s serving %s", name, asr.model_label)

    async def __serve_build_asgi_app__(self) -> FrontDoor:
        return self._service.front_door()  # the same application as `parley serve`

    async def _drain_when_stopping(self) -> None:
        while not replica_is_stopping():  # noqa: ASYNC110 (Ray has no stop event to await)
            await asyncio.sleep(STOP_POLL_S)
        log.info("replica stopping: draining %d session(s)", self._service.endpoint.live_sessions)
        await self._service.drain(self._settings.server.drain_timeout_s)

    def check_health(self) -> None:
        """Ray Serve restarts a replica whose model workers died."""
        if not self._service.worker.alive:
            raise RuntimeError("the ASR worker has stopped")
        if self._service.diarization is not None and not self._service.diarization.alive:
            raise RuntimeError("the diarization worker has stopped")

    async def __del__(self) -> None:
        if not hasattr(self, "_service"):
            return  # the constructor failed (a model that would not load): nothing runs
        self._watch.cancel()
        await self._service.stop()


def deployment_options(settings: Settings) -> dict:
    """Ray Serve's options for the replicas, from the settings."""
    cluster, server = settings.cluster, settings.server
    options: dict = {
        "max_ongoing_requests": server.max_sessions,
        "max_queued_requests": cluster.max_queued_sessions,
        "graceful_shutdown_timeout_s": server.drain_timeout_s + DRAIN_MARGIN_S,
        "graceful_shutdown_wait_loop_s": 0.5,
        "ray_actor_options": {"num_cpus": cluster.num_cpus, "num_gpus": cluster.num_gpus},
    }
    if cluster.max_replicas is not None and cluster.max_replicas > cluster.replicas:
        target = cluster.target_sessions or max(1.0, 0.75 * server.max_sessions)
        options["autoscaling_config"] = {
            "min_replicas": cluster.replicas,
            "initial_replicas": cluster.replicas,
            "max_replicas": cluster.max_replicas,
            "target_ongoing_requests": target,
            "upscale_delay_s": cluster.upscale_delay_s,
            "downscale_delay_s": cluster.downscale_delay_s,
            "look_back_period_s": cluster.look_back_s,
        }
    else:
        options["num_replicas"] = cluster.replicas
    return options


def application(settings: Settings, load: AsrLoader | None = None):
    """The bound Ray Serve application (``load``: how replicas load ASR; the model the
    settings name by default)."""
    deployment: Any = ParleyReplica  # serve.deployment made it a Deployment
    return deployment.options(**deployment_options(settings)).bind(replica_settings(settings), load)


def build(args: dict):
    """The application builder a Ray Serve config names (``import_path:
    parley.cluster.deployment:build``, as in deploy/kubernetes/rayservice.yaml): ``args``
    are settings (nested as in ``Settings``), read over the environment's PARLEY_*."""
    return application(Settings(**args))
