"""A WebSocket handshake refused with an HTTP answer is a finished handshake.

Parley refuses some handshakes with an HTTP response (ASGI's ``websocket.http.response``
extension): a vendor wire's wrong key (401), a path with no WebSocket (404). uvicorn's
sans-I/O WebSocket protocol, the one it picks when ``websockets`` is installed, sends
that answer but never marks the handshake done, so when the application returns it
logs "ASGI callable returned without completing handshake." at ERROR for every refusal
(Kludex/uvicorn#3138, open; its wsproto protocol marks it). An operator alerting on
ERROR lines would be paged by every client with a wrong key. Here the handshake counts
as done once the refusal's last byte is sent, as uvicorn already does for a refusal by
``websocket.close``.
"""

from __future__ import annotations

from uvicorn._types import ASGISendEvent
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from parley.transport.asgi import HTTP_RESPONSE_BODY


class RefusalEndsHandshake(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol, whose HTTP refusals end the handshake."""

    async def send(self, message: ASGISendEvent) -> None:
        await super().send(message)
        if message["type"] == HTTP_RESPONSE_BODY and not message.get("more_body", False):
            self.handshake_complete = True
