"""Plain HTTP answers on the WebSocket port: the browser client, probes, metrics, 404s."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from pathlib import Path
from urllib.parse import urlsplit

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from parley.protocol.messages import ErrorCode

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
# The page loads only its own scripts, styles and worklet, and talks only to this server.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; "
    "connect-src 'self' ws: wss:; img-src 'self' data: blob:; "
    "media-src 'self' blob:; worker-src 'self'; object-src 'none'; "
    "base-uri 'none'; frame-ancestors 'none'"
)
_STATIC_NAME = re.compile(r"^/([a-z0-9_-]+\.(?:html|js|css))$")


def _response(
    status: HTTPStatus, body: bytes, content_type: str, extra: Sequence[tuple[str, str]] = ()
) -> Response:
    headers = Headers(
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            ("X-Content-Type-Options", "nosniff"),
            *extra,
        ]
    )
    return Response(status.value, status.phrase, headers, body)


class StaticFiles:
    """The browser client's files, read once at start-up (a fixed, small set)."""

    def __init__(self, directory: Path | None):
        self._files: dict[str, tuple[bytes, str]] = {}
        if directory is None or not directory.is_dir():
            return
        for path in directory.iterdir():
            if path.suffix in CONTENT_TYPES and _STATIC_NAME.match("/" + path.name):
                self._files["/" + path.name] = (path.read_bytes(), CONTENT_TYPES[path.suffix])
        if "/index.html" in self._files:
            self._files["/"] = self._files["/index.html"]

    def get(self, path: str) -> Response | None:
        """The browser page's file at ``path``, with its security headers; None for
        a path it does not hold."""
        found = self._files.get(path)
        if found is None:
            return None
        body, content_type = found
        return _response(
            HTTPStatus.OK,
            body,
            content_type,
            [
                ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
                ("Referrer-Policy", "no-referrer"),
            ],
        )


# A refused handshake as the vendors' wires answer it (Deepgram's, AssemblyAI's): the
# HTTP status of each error code; any other is 400.
_REFUSAL_STATUS = {
    ErrorCode.UNAUTHORIZED: HTTPStatus.UNAUTHORIZED,
    ErrorCode.FORBIDDEN_ORIGIN: HTTPStatus.FORBIDDEN,
    ErrorCode.TOO_MANY_SESSIONS: HTTPStatus.TOO_MANY_REQUESTS,
    ErrorCode.SERVER_BUSY: HTTPStatus.SERVICE_UNAVAILABLE,
    ErrorCode.SHUTTING_DOWN: HTTPStatus.SERVICE_UNAVAILABLE,
}


def refusal_status(code: ErrorCode) -> HTTPStatus:
    """The HTTP status a handshake refused with ``code`` is answered with."""
    return _REFUSAL_STATUS.get(code, HTTPStatus.BAD_REQUEST)


def json_response(
    status: HTTPStatus, data: dict, extra: Sequence[tuple[str, str]] = ()
) -> Response:
    """An HTTP response of ``data`` as JSON (``extra``: more headers)."""
    return _response(status, json.dumps(data).encode(), "application/json", extra)


def text_response(status: HTTPStatus, body: bytes, content_type: str) -> Response:
    """An HTTP response of ``body`` with its content type."""
    return _response(status, body, content_type)


def make_request_router(
    routes: Mapping[str, Callable[[], Response]],
    static: StaticFiles,
    streams: frozenset[str],
    follows: Callable[[str], bool],
    check_handshake: Callable[[Request], Response | None],
):
    """websockets' process_request hook: let the ``streams`` paths through to the
    WebSocket handshake (unless ``check_handshake`` answers instead), and the paths that
    ``follows`` a session; answer ``routes`` (path → answer) and the static files, and
    404 the rest, and a WebSocket handshake on any of those."""

    def route(connection: object, request: Request) -> Response | None:
        path = urlsplit(request.path).path
        # WhisperLive's wire shares / with the page: a handshake is the wire's
        if path in streams and (_upgrades(request) or static.get(path) is None):
            return check_handshake(request)
        if follows(path):
            return None
        if _upgrades(request):  # a probe's or a page's answer is no refusal to it
            return json_response(
                HTTPStatus.NOT_FOUND,
                {"error": "not_found", "message": f"no WebSocket at this path: {path}"},
            )
        if path in routes:
            return routes[path]()
        page = static.get(path)
        if page is not None:
            return page
        return json_response(
            HTTPStatus.NOT_FOUND, {"error": "not_found", "message": f"no such path: {path}"}
        )

    return route


def _upgrades(request: Request) -> bool:
    """Whether the request asks for a WebSocket."""
    return request.headers.get("Upgrade", "").lower() == "websocket"
