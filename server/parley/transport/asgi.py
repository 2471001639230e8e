"""A served pipeline as an ASGI application: what uvicorn (``parley serve``, and each Ray
Serve replica) runs under the front door for everything but recordings.

A thin adapter, not a second server: HTTP requests get the same answers as on
``parley serve`` (probes, metrics, the browser page, 404s); a WebSocket becomes a
``Connection`` handed to the same endpoint, so every wire, limit, error and close code
is the one protocol.md gives. Handshake refusals are HTTP answers where the ASGI server
offers the ``websocket.http.response`` extension (uvicorn, under Ray Serve's proxy,
does), else a close before the accept, which the server answers with 403.
"""

from __future__ import annotations

import asyncio
import contextlib
from http import HTTPStatus
from typing import Protocol

from starlette.types import Receive, Scope, Send
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosedError, ConnectionClosedOK
from websockets.frames import Close
from websockets.http11 import Request, Response

from parley.transport.connection import Connection
from parley.transport.http import json_response

# Client messages read ahead of the endpoint: enough to keep the proxy's hop busy,
# and a bound on what one slow session can hold in memory (past either, the ASGI
# server stops reading the socket and TCP slows the client).
INBOX_MESSAGES = 16
INBOX_BYTES = 1024 * 1024  # 32 s of 16 kHz PCM16; one message more than this is let in
HTTP_RESPONSE_EXTENSION = "websocket.http.response"
HTTP_RESPONSE_BODY = HTTP_RESPONSE_EXTENSION + ".body"  # a refusal's body, its last one ending it


class Subprotocols(Protocol):
    """What picks a WebSocket's subprotocol (the streaming endpoint: by path)."""

    def subprotocol(self, request: Request, offered: list[str]) -> str | None:
        """The subprotocol to accept with, of those the client offered."""
        ...


class ServedPipeline(Protocol):
    """What an ASGI adapter needs of the pipeline it serves (service.Service is one):
    HTTP answers, the endpoint's subprotocols, and WebSocket connections."""

    def route(self, connection: object, request: Request) -> Response | None:
        """process_request-shaped: the HTTP answer, or None to let a WebSocket through."""
        ...

    @property
    def endpoint(self) -> Subprotocols:
        """The streaming endpoint, asked which subprotocol a handshake gets."""
        ...

    async def handle(self, connection: Connection) -> None:
        """Serve one accepted WebSocket until it closes."""
        ...


def request_of(scope: Scope) -> Request:
    """The handshake or HTTP request as websockets' ``Request`` (path with its query)."""
    query = scope.get("query_string", b"").decode("latin-1")
    path = scope["path"] + (f"?{query}" if query else "")
    return Request(
        path,
        Headers(
            [
                (name.decode("latin-1"), value.decode("latin-1"))
                for name, value in scope.get("headers", [])
            ]
        ),
    )


def _headers(response: Response) -> list[tuple[bytes, bytes]]:
    return [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in response.headers.raw_items()
    ]


async def send_response(send: Send, response: Response) -> None:
    """Send websockets' ``Response`` as an ASGI HTTP answer."""
    await send(
        {
            "type": "http.response.start",
            "status": response.status_code,
            "headers": _headers(response),
        }
    )
    await send({"type": "http.response.body", "body": response.body})


class AsgiConnection:
    """One accepted ASGI WebSocket as a ``Connection``.

    A reader task moves the client's messages into a bounded inbox, so that ``recv``
    can be cancelled (the endpoint does, on idle timeouts and drains) without losing one
    half-received from the ASGI server.
    """

    def __init__(self, request: Request, receive: Receive, send: Send):
        self._request = request
        self._receive = receive
        self._send = send
        self._inbox: asyncio.Queue[str | bytes | Close] = asyncio.Queue(INBOX_MESSAGES)
        self._closed: Close | None = None  # set once either side closed
        self.queued_bytes = 0  # in the inbox, not yet read by recv()
        self._taken = asyncio.Event()  # recv() took a message
        self._reader = asyncio.ensure_future(self._read())

    @property
    def request(self) -> Request:
        return self._request

    async def _read(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "websocket.disconnect":
                await self._inbox.put(Close(message.get("code", 1005), message.get("reason") or ""))
                return
            if message["type"] == "websocket.receive":
                data = message.get("bytes")
                item = data if data is not None else message.get("text", "")
                while self.queued_bytes >= INBOX_BYTES:
                    self._taken.clear()
                    await self._taken.wait()
                self.queued_bytes += len(item)
                await self._inbox.put(item)

    async def recv(self) -> str | bytes:
        """The client's next message; ConnectionClosed once either side closed."""
        if self._closed is not None:
            raise ConnectionClosedOK(None, self._closed)
        message = await self._inbox.get()
        if isinstance(message, Close):
            self._closed = message
            raise ConnectionClosedError(message, None)
        self.queued_bytes -= len(message)
        self._taken.set()
        return message

    async def send(self, message: str | bytes) -> None:
        """Send one message; ConnectionClosed if the connection is closed or the send fails."""
        if self._closed is not None:
            raise ConnectionClosedOK(None, self._closed)
        key = "text" if isinstance(message, str) else "bytes"
        try:
            await self._send({"type": "websocket.send", key: message})
        except Exception as exc:  # ASGI servers differ: OSError, RuntimeError, their own
            self._closed = Close(1006, "")
            raise ConnectionClosedError(None, None) from exc

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Close with ``code`` (once; the client may be gone) and stop reading."""
        if self._closed is None:
            self._closed = Close(code, reason)
            with contextlib.suppress(Exception):  # the client may be gone already
                await self._send({"type": "websocket.close", "code": code, "reason": reason})
        await self.stop_reading()

    async def stop_reading(self) -> None:
        """Stop the reader task (the connection is done with)."""
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)


class AsgiApp:
    """ASGI's three kinds of scope: lifespan (nothing to do: the replica starts and
    stops the service), HTTP and WebSocket."""

    def __init__(self, service: ServedPipeline):
        self._service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, send)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        elif scope["type"] == "lifespan":
            await _lifespan(receive, send)

    async def _http(self, scope: Scope, send: Send) -> None:
        response = self._service.route(None, request_of(scope))
        if response is None:  # a WebSocket path, asked without the upgrade
            response = json_response(
                HTTPStatus.UPGRADE_REQUIRED,
                {"error": "upgrade_required", "message": "this path is a WebSocket"},
            )
        await send_response(send, response)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        request = request_of(scope)
        refusal = self._service.route(None, request)
        if refusal is not None:
            await _refuse(scope, send, refusal)
            return
        subprotocol = self._service.endpoint.subprotocol(
            request, list(scope.get("subprotocols", ()))
        )
        await send({"type": "websocket.accept", "subprotocol": subprotocol})
        connection = AsgiConnection(request, receive, send)
        try:
            await self._service.handle(connection)
        finally:
            await connection.stop_reading()


async def _refuse(scope: Scope, send: Send, response: Response) -> None:
    if HTTP_RESPONSE_EXTENSION in (scope.get("extensions") or {}):
        await send(
            {
                "type": HTTP_RESPONSE_EXTENSION + ".start",
                "status": response.status_code,
                "headers": _headers(response),
            }
        )
        await send({"type": HTTP_RESPONSE_BODY, "body": response.body})
    else:
        await send({"type": "websocket.close", "code": 1008})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
