"""Plain HTTP answers on the WebSocket port: health, and 404 for unknown paths."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Callable
from urllib.parse import urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from parley.protocol.messages import STREAM_PATH


def _response(status: HTTPStatus, body: bytes, content_type: str) -> Response:
    headers = Headers([("Content-Type", content_type), ("Content-Length", str(len(body))),
                       ("Cache-Control", "no-store")])
    return Response(status.value, status.phrase, headers, body)


def json_response(status: HTTPStatus, data: dict) -> Response:
    return _response(status, json.dumps(data).encode(), "application/json")


def make_request_router(health: Callable[[], dict]):
    """websockets' process_request hook: answer HTTP paths, let /v1/stream through."""

    def route(connection: ServerConnection, request: Request) -> Response | None:
        path = urlsplit(request.path).path
        if path == STREAM_PATH:
            return None  # the WebSocket handshake goes on
        if path == "/health":
            return json_response(HTTPStatus.OK, health())
        return json_response(HTTPStatus.NOT_FOUND,
                             {"error": "not_found", "message": f"no such path: {path}"})

    return route
