"""Session resume (protocol.md section 6a): a session outlives a dropped connection for
``resume_window_s``, and a new connection with its ``resume_token`` takes it over.

Two pieces, both per endpoint, neither holding per-connection state of its own:

- ``SentLog``: one session's outbound messages, numbered as the client sees them
  (``seq``), kept so that a resumed connection is sent every message after the last
  one its client says it got. The session's results go into the log; each
  connection's writer sends from it. The log holds at most ``keep`` messages the
  connection has not been sent: past that the session waits (back-pressure, as a
  slow client always had).
- ``Resumes``: live sessions by token. A connection that brings a token hands itself
  to the session's own coroutine (``Handoff``) and waits until that coroutine is done
  with it; so a session is always served by the one coroutine that started it.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from parley.protocol.messages import Error, ErrorCode
from parley.protocol.paths import STREAM_PATH
from parley.transport.admission import Refused
from parley.transport.connection import Connection
from parley.transport.dialect import Dialect

REPLAY_KEEP = 1024  # messages a session keeps for its client, sent or not


class SentLog:
    """A session's outbound texts, numbered from 1 (see the module docstring)."""

    def __init__(self, keep: int = REPLAY_KEEP):
        self._keep = keep
        self._texts: deque[str] = deque()
        self._first = 1  # the seq of _texts[0]
        self.last_seq = 0  # the newest message's
        self.sent_seq = 0  # the newest one the attached connection was sent
        self.unattended = False  # no client will come back: nothing waits for one
        self._finished = False
        self._changed = asyncio.Event()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def append(self, text: str) -> None:
        """Add one message; waits while ``keep`` messages are unsent."""
        while not self.unattended and self.last_seq - self.sent_seq >= self._keep:
            await self._changed.wait()
        self._texts.append(text)
        self.last_seq += 1
        if len(self._texts) > self._keep:
            self._texts.popleft()
            self._first += 1
        self._notify()

    def finish(self) -> None:
        """The session has no more messages."""
        self._finished = True
        self._notify()

    def leave_unattended(self) -> None:
        """Nobody will read what follows (the resume window passed): never wait."""
        self.unattended = True
        self._notify()

    def can_replay_after(self, seq: int) -> bool:
        """Whether every message after ``seq`` is still kept."""
        return self._first - 1 <= seq <= self.last_seq

    async def after(self, seq: int) -> AsyncIterator[tuple[int, str]]:
        """(seq, text) of every message after ``seq``, as they come, until the last."""
        while True:
            while seq < self.last_seq:
                seq += 1
                yield seq, self._texts[seq - self._first]
            if self._finished:
                return
            changed = self._changed
            await changed.wait()

    def sent(self, seq: int) -> None:
        """The attached connection was sent everything up to ``seq``."""
        self.sent_seq = seq
        self._notify()


@dataclass
class Handoff:
    """A new connection for a live session: where its client's messages left off, and
    how the session's coroutine tells the connection's handler it is done with it."""

    connection: Connection
    last_seq: int
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


@dataclass
class _Resumable:
    key: str
    session_id: str
    handoffs: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(1))


class Resumes:
    """Live sessions by resume token."""

    def __init__(self) -> None:
        self._by_token: dict[str, _Resumable] = {}

    def register(self, key: str, session_id: str) -> str:
        """A new resume token for session ``session_id``, which only the key ``key`` may
        resume."""
        token = secrets.token_urlsafe(24)
        self._by_token[token] = _Resumable(key, session_id)
        return token

    def forget(self, token: str) -> list[Handoff]:
        """No more resumes of the token's session; the handoffs that came too late."""
        found = self._by_token.pop(token, None)
        late = []
        while found is not None and not found.handoffs.empty():
            late.append(found.handoffs.get_nowait())
        return late

    def claim(self, token: str, key: str, handoff: Handoff) -> None:
        """Hand ``handoff`` to the token's session; ``Error`` (not_found) if there is no
        such live session for this key, or another connection is already taking it."""
        found = self._by_token.get(token)
        if found is None or found.key != key:  # another key's token says nothing of it
            raise Refused(
                Error(
                    ErrorCode.NOT_FOUND,
                    "no live session to resume with "
                    "that token (it ended, or its resume window passed)",
                )
            )
        try:
            found.handoffs.put_nowait(handoff)
        except asyncio.QueueFull:
            raise Refused(
                Error(ErrorCode.NOT_FOUND, "another connection is resuming this session")
            ) from None

    def give_back(self, token: str, handoff: Handoff) -> None:
        """Requeue a handoff taken by a wait that ended for another reason."""
        self._by_token[token].handoffs.put_nowait(handoff)

    async def next_handoff(self, token: str) -> Handoff:
        """Wait for the next connection that resumes the session of ``token``."""
        return await self._by_token[token].handoffs.get()


def resume_point(dialect: Dialect, params: Mapping[str, str]) -> int:
    """The ``last_seq`` of a resume (0: none of the session's messages arrived), or
    Refused (bad_config)."""

    def refused(message: str) -> Refused:
        return Refused(Error(ErrorCode.BAD_CONFIG, message))

    if not dialect.resumable:
        raise refused(f"sessions on {dialect.path} cannot be resumed (only {STREAM_PATH})")
    unknown = set(params) - {"resume", "last_seq", "token"}
    if unknown:
        raise refused(
            f"a resume takes only resume, last_seq and token; not {', '.join(sorted(unknown))}"
        )
    raw = params.get("last_seq", "0")
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 12:  # '¹' is a digit to isdigit
        raise refused(
            "last_seq must be the seq of the last message received (a whole number, 0 for none)"
        )
    return int(raw)


def dropped(closed: ConnectionClosed) -> bool:
    """Whether the connection went without its client closing it: no close frame
    (1006; uvicorn says 1005 for a connection lost after the handshake), or a send that
    failed."""
    close = closed.rcvd or closed.sent
    return close is None or close.code in (CloseCode.ABNORMAL_CLOSURE, CloseCode.NO_STATUS_RCVD)
