"""The one front door of ``parley serve`` and of each cluster replica: an ASGI
application under uvicorn.

Recordings are plain HTTP requests with bodies, served by Starlette routes
(``file_routes``), as is OpenAI's model listing (``model_routes``); everything else
(every WebSocket wire, the probes, metrics, the browser page, 404s) goes to the
pipeline's own adapter (``asgi.AsgiApp``), so each keeps the answers, errors and close
codes protocol.md gives it.

Pages of the origins the operator allows may call the routes from a browser: Starlette's
CORS middleware answers their preflights and marks the answers readable by them. The
origin check itself stays the routes' own (403 ``forbidden_origin``), as on the streams,
which browsers open without CORS.
"""

from __future__ import annotations

from collections.abc import Sequence
from http import HTTPStatus

from starlette.middleware.cors import CORSMiddleware
from starlette.routing import BaseRoute, Match, Route, Router
from starlette.types import ASGIApp

from parley.transport.asgi import AsgiApp, Receive, Scope, Send, ServedPipeline, send_response
from parley.transport.auth import OriginPolicy
from parley.transport.http import json_response

# What a cross-origin page may read of an answer besides CORS's safelisted headers: when
# to try again (429, 503), and Deepgram's request id and reason.
EXPOSED_HEADERS = ("Retry-After", "dg-request-id", "dg-error")


class FrontDoor:
    """The one ASGI application: the HTTP routes, else the streams' endpoint."""

    def __init__(
        self,
        service: ServedPipeline,
        routes: Sequence[BaseRoute],
        stream_paths: frozenset[str],
        origins: OriginPolicy,
    ):
        self._streams = AsgiApp(service)
        self._router = Router(routes=list(routes))
        self._stream_paths = stream_paths
        self._cross_origin = origins.allowed is not None
        self._routes: ASGIApp = self._router
        if origins.allowed is not None:
            self._routes = CORSMiddleware(
                self._router,
                allow_origins=sorted(origins.allowed),
                allow_methods=["GET", "POST"],
                allow_headers=["*"],  # keys, and the vendors' SDKs' own headers
                allow_private_network=True,  # a page on the internet, a server on the LAN
                expose_headers=EXPOSED_HEADERS,
            )

    def _methods(self, scope: Scope) -> set[str] | None:
        """The methods the routes of this request's path take; None if no route has it."""
        if scope["type"] != "http":
            return None
        found = [
            route
            for route in self._router.routes
            if isinstance(route, Route) and route.matches(scope)[0] is not Match.NONE
        ]
        if not found:
            return None
        return {method for route in found for method in route.methods or ()}

    def _preflight(self, scope: Scope) -> bool:
        headers = dict(scope.get("headers", []))
        return (
            scope["method"] == "OPTIONS"
            and b"origin" in headers
            and b"access-control-request-method" in headers
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        methods = self._methods(scope)
        if methods is None:
            await self._streams(scope, receive, send)
        elif scope["method"] in methods or (self._cross_origin and self._preflight(scope)):
            await self._routes(scope, receive, send)
        elif scope["path"] in self._stream_paths:  # a WebSocket's path too (/v1/listen)
            if scope["method"] == "GET":
                await self._streams(scope, receive, send)
            else:
                await _method_not_allowed(scope, send, methods | {"GET"})
        else:
            await _method_not_allowed(scope, send, methods)


async def _method_not_allowed(scope: Scope, send: Send, methods: set[str]) -> None:
    allow = ", ".join(sorted(methods))
    message = f"{scope['method']} {scope['path']}: this path takes {allow}"
    await send_response(
        send,
        json_response(
            HTTPStatus.METHOD_NOT_ALLOWED,
            {"error": "method_not_allowed", "message": message},
            [("Allow", allow)],
        ),
    )
