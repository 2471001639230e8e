"""The one front door of ``parley serve`` and of each cluster replica: an ASGI
application under uvicorn.

Recordings are plain HTTP requests with bodies, served by Starlette routes
(``file_routes``), as is OpenAI's model listing (``model_routes``); everything else
(every WebSocket wire, the probes, metrics, the browser page, 404s) goes to the
pipeline's own adapter (``asgi.AsgiApp``), so each keeps the answers, errors and close
codes protocol.md gives it.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.routing import BaseRoute, Match, Router

from parley.transport.asgi import AsgiApp, Receive, Scope, Send, ServedPipeline


class FrontDoor:
    """The one ASGI application: the HTTP routes, else the streams' endpoint."""

    def __init__(self, service: ServedPipeline, routes: Sequence[BaseRoute]):
        self._streams = AsgiApp(service)
        self._routes = Router(routes=list(routes))

    def _routed(self, scope: Scope) -> bool:
        """Whether a route takes this request, path and method both (a path of one with
        another method is the streams' adapter's, as any unknown request is)."""
        return scope["type"] == "http" and any(
            route.matches(scope)[0] is Match.FULL for route in self._routes.routes
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._routed(scope):
            await self._routes(scope, receive, send)
        else:
            await self._streams(scope, receive, send)
