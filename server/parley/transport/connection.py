"""What the streaming endpoint needs of a WebSocket connection, whoever accepted it.

websockets' ``ServerConnection`` (``parley serve``) has this shape already; the ASGI
adapter of a Ray Serve replica (transport/asgi.py) gives it the same. A connection the
client has left raises websockets' ``ConnectionClosed`` from ``send`` and ``recv``.
"""

from __future__ import annotations

from typing import Protocol

from websockets.http11 import Request


class Connection(Protocol):
    """What the endpoint needs of a WebSocket connection (websockets' or the ASGI bridge's)."""

    @property
    def request(self) -> Request | None:
        """The handshake's request: its path (with the query) and headers."""

    async def recv(self) -> str | bytes:
        """The client's next message; cancelling it loses no message."""

    async def send(self, message: str | bytes) -> None:
        """Send one message; websockets' ``ConnectionClosed`` once the client has left."""

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Close the connection with a WebSocket close code and reason (protocol.md
        section 5)."""
