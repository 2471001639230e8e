"""The one front door of ``parley serve`` and of each cluster replica: an ASGI
application under uvicorn.

Recordings are plain HTTP requests with bodies, served by Starlette routes
(``file_routes``); everything else (every WebSocket wire, the probes, metrics, the
browser page, 404s) goes to the pipeline's own adapter (``asgi.AsgiApp``), so
each keeps the answers, errors and close codes protocol.md gives it.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.routing import BaseRoute, Route, Router

from parley.transport.asgi import AsgiApp, Receive, Scope, Send, ServedPipeline


class FrontDoor:
    """The one ASGI application: recordings' HTTP routes, else the streams' endpoint."""

    def __init__(self, service: ServedPipeline, file_routes: Sequence[BaseRoute] | None):
        self._streams = AsgiApp(service)
        self._files = Router(routes=list(file_routes)) if file_routes is not None else None
        self._file_paths = (
            frozenset(route.path for route in self._files.routes if isinstance(route, Route))
            if self._files is not None
            else frozenset()
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self._files is not None
            and scope["type"] == "http"
            and scope.get("method") == "POST"
            and scope["path"] in self._file_paths
        ):
            await self._files(scope, receive, send)
        else:
            await self._streams(scope, receive, send)
