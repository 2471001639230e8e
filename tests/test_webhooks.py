"""Result webhooks: a real receiver on loopback verifies every delivery with the
`standardwebhooks` package, as a user's endpoint would."""

import asyncio
import base64
import json
import os

import pytest
from aiohttp import web
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError
from websockets.asyncio.client import connect

from conftest import chunks_of, heard_between
from parley.runtime.webhook_config import WebhookConfig
from parley.runtime.webhooks import WebhookSender

SECRET = "whsec_" + base64.b64encode(os.urandom(24)).decode()


class Receiver:
    """An HTTP endpoint that verifies deliveries; ``fail_first`` attempts of each message
    id are answered 503."""

    def __init__(self, fail_first: int = 0):
        self.fail_first = fail_first
        self.attempts: dict[str, int] = {}
        self.events: list[dict] = []
        self.bodies: list[tuple[bytes, dict]] = []

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = dict(request.headers)
        message_id = headers["webhook-id"]
        self.attempts[message_id] = self.attempts.get(message_id, 0) + 1
        if self.attempts[message_id] <= self.fail_first:
            return web.Response(status=503)
        self.events.append(Webhook(SECRET).verify(body, headers))
        self.bodies.append((body, headers))
        return web.Response(status=204)

    async def delivered(self, timeout_s: float = 10.0) -> list[dict]:
        """The events, once at least one has come (or ``timeout_s`` has passed)."""
        for _ in range(round(timeout_s / 0.05)):
            if self.events:
                break
            await asyncio.sleep(0.05)
        return self.events

    async def __aenter__(self) -> str:
        app = web.Application()
        app.router.add_post("/hooks", self.handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/hooks"

    async def __aexit__(self, *exc) -> None:
        await self._runner.cleanup()


async def test_a_sessions_lifecycle_and_finals_arrive_signed_and_in_order(start, talk):
    """session.started, each final as on the wire, session.ended: every delivery verifies
    under the secret (and not under another), and the metrics count them."""
    audio, _ = talk
    receiver = Receiver()
    async with receiver as url:
        _, server = await start(webhooks={"url": url, "secret": SECRET})
        async with connect(f"ws://127.0.0.1:{server.port}/v1/stream") as ws:
            async for chunk in chunks_of(audio):
                await ws.send(chunk)
            await ws.send(json.dumps({"type": "end_of_stream"}))
            wire = [json.loads(m) async for m in ws]
        await server.stop()  # waits for the deliveries still pending
    # as on the wire, less the wire's message numbers (seq, for a resume)
    finals = [{k: v for k, v in m.items() if k != "seq"} for m in wire if m["type"] == "final"]
    events = receiver.events
    assert [e["type"] for e in events] == [
        "session.started",
        *["transcript.final"] * len(finals),
        "session.ended",
    ]
    assert {e["data"]["session_id"] for e in events} == {wire[0]["session_id"]}
    assert [
        {k: v for k, v in e["data"].items() if k != "session_id"} for e in events[1:-1]
    ] == finals
    for final in finals:
        assert final["text"] == heard_between(audio, final["start"], final["end"])
    assert events[-1]["data"]["outcome"] == "ended"
    other = Webhook("whsec_" + base64.b64encode(os.urandom(24)).decode())
    for body, headers in receiver.bodies:
        with pytest.raises(WebhookVerificationError):
            other.verify(body, headers)
    metrics = server.metrics.render().decode()
    assert f'parley_webhook_events_total{{outcome="delivered"}} {len(events)}.0' in metrics


async def test_failed_attempts_are_retried_with_the_same_id_in_order():
    """A receiver that answers 503 twice per message still gets every event, in order,
    each under one webhook-id across its attempts."""
    outcomes = []
    receiver = Receiver(fail_first=2)
    async with receiver as url:
        sender = WebhookSender(WebhookConfig(url, SECRET, first_retry_s=0.01), outcomes.append)
        await sender.start()
        feed = sender.feed("s1")
        for k in range(5):
            feed.publish("transcript.final", {"k": k})
        feed.close()
        await sender.stop(grace_s=30)
    assert [e["data"]["k"] for e in receiver.events] == list(range(5))
    assert set(receiver.attempts.values()) == {3} and outcomes == ["delivered"] * 5


async def test_an_unreachable_receiver_never_slows_transcription(start, talk):
    """With the receiver down, the session's finals still come on the wire as always; the
    events fail after their attempts, and a full queue drops what does not fit."""
    audio, _ = talk
    _, server = await start(
        webhooks={
            "url": "http://127.0.0.1:9/hooks",
            "secret": SECRET,
            "max_attempts": 1,
            "queue_size": 2,
        }
    )
    async with connect(f"ws://127.0.0.1:{server.port}/v1/stream") as ws:
        async for chunk in chunks_of(audio):
            await ws.send(chunk)
        await ws.send(json.dumps({"type": "end_of_stream"}))
        wire = [json.loads(m) async for m in ws]
    assert wire[-1]["type"] == "session_ended" and ws.close_code == 1000
    assert len([m for m in wire if m["type"] == "final"]) == 3
    await server.stop()
    metrics = server.metrics.render().decode()
    failed = _count(metrics, "failed")
    dropped = _count(metrics, "dropped")
    assert failed >= 1 and failed + dropped == 5  # started, three finals, ended


def _count(metrics: str, outcome: str) -> float:
    line = next(
        line
        for line in metrics.splitlines()
        if line.startswith(f'parley_webhook_events_total{{outcome="{outcome}"}}')
    )
    return float(line.split()[-1])


def test_webhooks_need_a_whsec_secret():
    """A URL without a Standard Webhooks secret is refused at start-up."""
    from pydantic import ValidationError

    from parley.config import Settings

    for secret in (None, "plain-text"):
        with pytest.raises(ValidationError, match="whsec_"):
            Settings(webhooks={"url": "https://example.com/hooks", "secret": secret})


async def test_a_session_may_name_an_allowed_target(start, talk):
    """With webhooks.allowed_targets and no server-wide URL, a session that names an
    allowed URL (?webhook_url=, or Deepgram's callback=) gets its events there; another
    URL is refused (bad_config, 4400); a session that names none sends none."""
    from urllib.parse import quote

    from conftest import refused

    audio, _ = talk
    receiver = Receiver()
    async with receiver as url:
        _, server = await start(
            webhooks={"allowed_targets": [url.rsplit("/", 1)[0] + "/"], "secret": SECRET}
        )
        base = f"ws://127.0.0.1:{server.port}"
        message, code = await refused(
            f"{base}/v1/stream?webhook_url=" + quote("https://elsewhere.example/hooks")
        )
        assert (message["code"], code) == ("bad_config", 4400)
        for path in (
            f"/v1/stream?webhook_url={quote(url)}",
            f"/v1/listen?encoding=linear16&sample_rate=16000&callback={quote(url)}",
            "/v1/stream",
        ):
            async with connect(base + path) as ws:
                async for chunk in chunks_of(audio[: 16000 * 3]):
                    await ws.send(chunk)
                await ws.send(
                    json.dumps({"type": "end_of_stream" if "stream" in path else "CloseStream"})
                )
                async for _ in ws:
                    pass
        await server.stop()
    sessions = {}
    for event in receiver.events:
        sessions.setdefault(event["data"]["session_id"], []).append(event["type"])
    assert len(sessions) == 2  # the two that named it; the refused one never started
    for kinds in sessions.values():
        assert kinds[0] == "session.started" and kinds[-1] == "session.ended"
        assert "transcript.final" in kinds


def test_a_target_is_allowed_by_where_it_goes_not_by_how_it_begins():
    """A session's own target must go where a listed prefix goes: the same scheme, host
    and port, no user info, a path at or below the prefix's, as aiohttp reads it."""
    sender = WebhookSender(
        WebhookConfig(
            url=None,
            secret=SECRET,
            allowed_targets=("https://hooks.example.com", "http://10.0.0.5:8080/tenants/a"),
        )
    )
    allowed = [
        "https://hooks.example.com/",
        "https://hooks.example.com/parley?x=1",
        "https://HOOKS.example.com:443/parley",
        "http://10.0.0.5:8080/tenants/a",
        "http://10.0.0.5:8080/tenants/a/calls",
    ]
    refused = [
        "https://hooks.example.com@evil.example/",  # the host is evil.example
        "https://hooks.example.com.evil.example/",
        "https://hooks.example.com:8443/",
        "http://hooks.example.com/",
        "https://user:pw@hooks.example.com/",
        "https://hooks.example.com\\@evil.example/",
        "http://10.0.0.5:8080/tenants/ab",
        "http://10.0.0.5:8080/tenants/a/../b",
        "http://10.0.0.5:8081/tenants/a",
        "file:///etc/passwd",
        "not a url",
    ]
    assert [url for url in allowed if not sender.allows(url)] == []
    assert [url for url in refused if sender.allows(url)] == []
