"""Result webhooks: each session's lifecycle and finals POSTed as signed JSON.

For clients that cannot read results on the connection that carries the audio (a
phone system, a meeting bot). Deliveries are signed by the Standard Webhooks spec
(``webhook-id``, ``webhook-timestamp``, ``webhook-signature: v1,<HMAC-SHA256>``) with
the `standardwebhooks` package, the same code a receiver verifies with.

Each session has a feed: a bounded queue and one task that delivers its events in
order, retrying with exponential backoff. Publishing never waits, so delivery never
slows transcription: when a feed's queue is full the event is dropped and counted.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime

import aiohttp
import yarl
from standardwebhooks import Webhook

from parley.runtime.webhook_config import WebhookConfig

log = logging.getLogger(__name__)


def _under(target: yarl.URL, prefix: yarl.URL) -> bool:
    if (target.scheme, target.host, target.port) != (prefix.scheme, prefix.host, prefix.port):
        return False
    if prefix.raw_query_string and target.raw_query_string != prefix.raw_query_string:
        return False
    base = prefix.path
    if base.endswith("/"):
        return target.path.startswith(base)
    return target.path == base or target.path.startswith(base + "/")


class WebhookSender:
    """Delivers every session's events to one URL; one HTTP client for all of them.

    ``on_outcome`` is told ``delivered``, ``failed`` (attempts used up) or ``dropped``
    (queue full) for each event, for metrics."""

    def __init__(self, config: WebhookConfig, on_outcome: Callable[[str], None] = lambda _: None):
        self.config = config
        self._signer = Webhook(config.secret)  # ValueError-like errors for a bad secret
        self._on_outcome = on_outcome
        self._client: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task] = set()
        self._targets = [yarl.URL(prefix) for prefix in config.allowed_targets]

    async def start(self) -> None:
        """Open the HTTP client (on the event loop that will post)."""
        self._client = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.config.timeout_s)
        )

    def allows(self, url: str) -> bool:
        """Whether a session may have its events sent to ``url``: a URL under one of
        ``allowed_targets``, read as aiohttp will read it (yarl): the same scheme, host
        and port, no user info, and a path at or below the prefix's (by whole
        segments, dot segments resolved). Compared as strings, a prefix
        ``https://hooks.example.com`` let ``https://hooks.example.com@evil.example/``
        and ``https://hooks.example.com.evil.example/`` through."""
        try:
            target = yarl.URL(url)
        except ValueError:
            return False
        if (
            target.scheme not in ("http", "https")
            or target.user is not None
            or target.password is not None
        ):
            return False
        return any(_under(target, prefix) for prefix in self._targets)

    def feed(self, session_id: str, url: str | None = None) -> WebhookFeed | None:
        """A new session's feed, to ``url`` (allowed by the caller) or the server's URL;
        None when there is neither. Its task runs until the feed is closed and emptied."""
        url = url or self.config.url
        if url is None:
            return None
        feed = WebhookFeed(self, session_id, url)
        task = asyncio.create_task(feed.deliver_all(), name=f"webhooks-{session_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return feed

    async def stop(self, grace_s: float) -> None:
        """Let closed feeds finish delivering for at most ``grace_s``, then give up."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace_s)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.close()

    async def post(self, url: str, message_id: str, body: str) -> bool:
        """One signed delivery attempt; True on a 2xx answer."""
        assert self._client is not None, "start() the sender first"
        now = datetime.now(UTC)
        headers = {
            "content-type": "application/json",
            "webhook-id": message_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": self._signer.sign(message_id, now, body),
        }
        try:
            async with self._client.post(url, data=body.encode(), headers=headers) as response:
                return 200 <= response.status < 300
        except (TimeoutError, aiohttp.ClientError):
            return False

    def outcome(self, outcome: str) -> None:
        """Count one delivery's outcome (metrics)."""
        self._on_outcome(outcome)

    async def deliver(self, url: str, message_id: str, body: str, owner: str) -> bool:
        """Post ``body`` until a 2xx answer, with backoff, at most ``max_attempts`` times
        (``owner``: the session or request it belongs to, for the log)."""
        config = self.config
        wait = config.first_retry_s
        for attempt in range(1, config.max_attempts + 1):
            if await self.post(url, message_id, body):
                self.outcome("delivered")
                return True
            if attempt < config.max_attempts:
                await asyncio.sleep(wait)
                wait = min(2 * wait, config.max_retry_s)
        self.outcome("failed")
        log.warning(
            "webhook %s of %s failed after %d attempts",
            message_id,
            owner,
            config.max_attempts,
            extra={"session_id": owner},
        )
        return False

    def send(self, url: str, message_id: str, body: str) -> None:
        """Deliver one body (a recording's callback) in the background, as ``deliver``;
        ``stop`` waits for it as for the feeds."""
        task = asyncio.create_task(
            self.deliver(url, message_id, body, message_id), name=f"callback-{message_id}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


_CLOSED = object()


class WebhookFeed:
    """One session's events, delivered in order (``publish`` never waits)."""

    def __init__(self, sender: WebhookSender, session_id: str, url: str):
        self._sender = sender
        self._session_id = session_id
        self._url = url
        self._limit = sender.config.queue_size
        self._queue: asyncio.Queue = asyncio.Queue(self._limit + 1)  # + the end marker
        self._numbers = itertools.count(1)

    def publish(self, kind: str, data: dict) -> None:
        """Queue one event (``kind`` such as ``transcript.final``); dropped if full."""
        event = {
            "type": kind,
            "timestamp": datetime.now(UTC).isoformat(),
            "data": {"session_id": self._session_id, **data},
        }
        message_id = f"msg_{self._session_id}_{next(self._numbers)}"  # the same on retries
        if self._queue.qsize() < self._limit:
            self._queue.put_nowait((message_id, json.dumps(event, ensure_ascii=False)))
        else:
            self._sender.outcome("dropped")
            log.warning(
                "webhook queue of session %s is full: dropped %s",
                self._session_id,
                kind,
                extra={"session_id": self._session_id},
            )

    def close(self) -> None:
        """No more events: the feed's task ends once the queue is delivered."""
        self._queue.put_nowait(_CLOSED)  # publish leaves it a place

    async def deliver_all(self) -> None:
        """Deliver the session's queued events in order, until the feed is closed."""
        while (item := await self._queue.get()) is not _CLOSED:
            await self._deliver(*item)

    async def _deliver(self, message_id: str, body: str) -> None:
        await self._sender.deliver(self._url, message_id, body, self._session_id)
