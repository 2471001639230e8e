"""/v1/sessions/{id}/events: follow a live session's results from another connection.

For streams whose own connection cannot carry results back (a Twilio call) or that
several parties watch (a meeting's dashboard). A follower gets every message the
session produces, in Parley's own form (protocol.md section 3), from when it joins
until ``session_ended``; then close 1000. Each follower has a bounded queue: one that
falls that far behind is closed (``server_busy``, 1013) rather than slowing anything;
and a session has at most ``FOLLOWERS_PER_SESSION``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from urllib.parse import parse_qsl, urlsplit

from websockets.exceptions import ConnectionClosed

from parley.protocol.errors import CloseCode, close_reason
from parley.protocol.messages import Error, ErrorCode, ServerMessage, as_json, encode
from parley.protocol.paths import FOLLOW_PATH
from parley.transport.admission import Access
from parley.transport.auth import ANONYMOUS
from parley.transport.connection import Connection
from parley.transport.dialect import by_key
from parley.transport.native import NativeDialect

log = logging.getLogger(__name__)
FOLLOWER_QUEUE = 256
# Each follower is a connection, a queue, and a copy of every message: a session's
# followers are bounded, so that one key cannot open them without end.
FOLLOWERS_PER_SESSION = 16
_END, _BEHIND, _GONE = object(), object(), object()


class Followers:
    """Live sessions that may be followed, and their followers' queues."""

    def __init__(self, access: Access):
        self._access = access
        self._live: dict[str, str] = {}  # session id → the name of the key it started with
        self._queues: dict[str, set[asyncio.Queue]] = {}

    @staticmethod
    def matches(path: str) -> bool:
        """Whether ``path`` is a session's followers' path."""
        return FOLLOW_PATH.match(urlsplit(path).path) is not None

    def opened(self, session_id: str, key: str) -> None:
        """A session started (by ``key``): it may be followed from now on."""
        self._live[session_id] = key
        self._queues[session_id] = set()

    def publish(self, session_id: str, message: ServerMessage, track: str | None = None) -> None:
        """Give a session's message to its followers (never waits; encoded only if any),
        with the ``track`` it is of on a connection of several."""
        queues = self._queues.get(session_id)
        if not queues:
            return
        text = (
            encode(message)
            if track is None
            else json.dumps({**as_json(message), "track": track}, ensure_ascii=False)
        )
        for queue in queues:
            if queue.qsize() < FOLLOWER_QUEUE:
                queue.put_nowait(text)
            elif queue.qsize() == FOLLOWER_QUEUE:  # the last slot is the end marker's
                while not queue.empty():
                    queue.get_nowait()
                queue.put_nowait(_BEHIND)

    def closed(self, session_id: str) -> None:
        """The session ended: each follower gets the end and is closed."""
        self._live.pop(session_id, None)
        for queue in self._queues.pop(session_id, ()):
            queue.put_nowait(_END)  # publish always leaves it room

    async def handle(self, connection: Connection) -> None:
        """Serve one follower until its session ends (or refuse it)."""
        request = connection.request
        assert request is not None
        found = FOLLOW_PATH.match(urlsplit(request.path).path)
        assert found is not None
        session_id = found[1]
        params = dict(parse_qsl(urlsplit(request.path).query))
        key = by_key(self._access.keys, NativeDialect.offered_key(params, request.headers))
        if key is None:
            await _refuse(connection, Error(ErrorCode.UNAUTHORIZED, "a valid API key is required"))
            return
        owner = self._live.get(session_id)
        # A key follows its own sessions (even once its key is revoked: none other may),
        # and those started on a server without keys.
        if owner is None or (owner != ANONYMOUS and owner != key):
            await _refuse(
                connection, Error(ErrorCode.NOT_FOUND, f"no live session {session_id} to follow")
            )
            return
        if len(self._queues[session_id]) >= FOLLOWERS_PER_SESSION:
            await _refuse(
                connection,
                Error(
                    ErrorCode.TOO_MANY_SESSIONS,
                    f"session {session_id} has its limit of {FOLLOWERS_PER_SESSION} followers",
                ),
            )
            return
        queue: asyncio.Queue = asyncio.Queue(FOLLOWER_QUEUE + 1)  # + the end marker
        self._queues[session_id].add(queue)
        log.info("key %s follows session %s", key, session_id, extra={"session_id": session_id})
        gone = asyncio.ensure_future(_until_gone(connection))
        try:
            await connection.send(json.dumps({"type": "following", "session_id": session_id}))
            while (item := await _next(queue, gone)) is not _END:
                if item is _GONE:
                    return
                if item is _BEHIND:
                    await _refuse(
                        connection,
                        Error(
                            ErrorCode.SERVER_BUSY,
                            f"this follower fell {FOLLOWER_QUEUE} messages behind",
                        ),
                    )
                    return
                assert isinstance(item, str)  # an encoded message
                await connection.send(item)
            await connection.close(CloseCode.NORMAL, "session ended")
        except ConnectionClosed:
            pass
        finally:
            gone.cancel()
            self._queues.get(session_id, set()).discard(queue)


async def _until_gone(connection: Connection) -> None:
    """Read (and ignore) what a follower sends, until it leaves."""
    with contextlib.suppress(ConnectionClosed):
        while True:
            await connection.recv()


async def _next(queue: asyncio.Queue, gone: asyncio.Future) -> object:
    """The follower's next queued item, or _GONE once it has left (so that a follower
    who leaves a quiet session gives its place back at once, not at the next message)."""
    item = asyncio.ensure_future(queue.get())
    await asyncio.wait({item, gone}, return_when=asyncio.FIRST_COMPLETED)
    if item.done():
        return item.result()
    item.cancel()
    return _GONE


async def _refuse(connection: Connection, error: Error) -> None:
    with contextlib.suppress(ConnectionClosed):
        await connection.send(encode(error))
        await connection.close(
            error.code.close_code or CloseCode.INTERNAL_ERROR, close_reason(error.message)
        )
