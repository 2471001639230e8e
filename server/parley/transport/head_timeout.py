"""A bound on the wait for a request's head: its request line and headers.

uvicorn arms its keep-alive timer only once a response is complete, so a connection
that sent nothing, or half a request line, was held open for ever; enough of them and
the server runs out of file descriptors (slowloris). Here each request's head must
arrive whole within ``server.idle_timeout_s`` of the connection's opening (for its
first request) or of the head's first byte (for later ones), or the connection is
closed: with a 408 where some of the head came, silently where none did (as uvicorn
closes a connection left idle between requests). It is a deadline for the
whole head, not a wait between its bytes, so a client that sends a byte every few
seconds is closed too. A request's body is its route's to bound (upload_body.py); a
WebSocket's messages, the live wire's idle timeout.

A head is bounded in size too: uvicorn gathers a request's URL and headers without
limit, so one client sending an endless header line held about as much memory as it
could send before the deadline (95 MiB in 8 s here). httptools gathers a header line
whole before uvicorn sees it, so a head's bytes are counted as they arrive; past
``MAX_HEAD_BYTES`` the request is answered 431 and its connection closed. The bound
leaves room for the largest query protocol.md allows (100 keyterms and 200
replacements, percent-encoded: under 100 kB of ASCII).

The head is what httptools' parser reads between a message's beginning and its
headers' end, so this is uvicorn's httptools protocol (httptools is a dependency).
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD_BYTES = 1 << 20  # a request's URL and headers together


def _answer(status: bytes, text: bytes) -> bytes:
    return (
        b"HTTP/1.1 %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (status, len(text), text)
    )


_TIMED_OUT = _answer(b"408 Request Timeout", b"the request's head came too slowly")
_TOO_LARGE = _answer(
    b"431 Request Header Fields Too Large",
    b"the request's head exceeds %d bytes" % MAX_HEAD_BYTES,
)


def with_head_timeout(timeout_s: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, closing a connection whose request head is not in
    within ``timeout_s``."""

    class HeadTimed(HttpToolsProtocol):
        _head_timer: asyncio.TimerHandle | None = None
        _head_begun = False
        _head_bytes = 0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._head_begun = True
            self._head_bytes = 0
            if self._head_timer is None:  # a later request on the connection
                self._arm()

        def on_headers_complete(self) -> None:
            self._head_begun = False
            self._disarm()
            super().on_headers_complete()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if not self._head_begun:  # no head begun, or this one ended in ``data``
                return
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                self._disarm()
                self.transport.write(_TOO_LARGE)
                self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._head_timer = self.loop.call_later(timeout_s, self._on_head_timeout)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _on_head_timeout(self) -> None:
            self._head_timer = None
            if self.transport.is_closing():
                return
            if self._head_begun:
                self.transport.write(_TIMED_OUT)
            self.transport.close()

    return HeadTimed
