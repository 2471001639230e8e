"""The API key file read again while the server runs (docs/deployment.md, "Keys"): keys
added, rotated and revoked without a restart, over a real server (fake engine) on
loopback; a file that would break access is not used."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest
from websockets.asyncio.client import connect

from conftest import refused
from parley.logs import REDACTED, RedactSecrets, redact_also

ALICE, BOB = "alice-key-5d1e", "bob-key-90ac"


async def _session_started(url: str) -> None:
    async with connect(url) as ws:
        assert json.loads(await ws.recv())["type"] == "session_started"


async def test_keys_are_added_and_revoked_while_sessions_run(start, tmp_path):
    key_file = tmp_path / "keys"
    key_file.write_text(f"alice:{ALICE}\n")
    url, server = await start(api_keys_file=key_file)
    watch = server.service.keys
    assert watch is not None
    base = url.replace("ws://", "http://").removesuffix("/v1/stream")
    async with httpx.AsyncClient(base_url=base) as http:
        grant = await http.post("/v1/auth/token", headers={"Authorization": f"Bearer {ALICE}"})
        token = grant.json()["token"]
        assert not await watch.check()  # the file as the server started with it
        async with connect(f"{url}?token={ALICE}") as running:
            started = json.loads(await running.recv())
            assert started["type"] == "session_started"

            key_file.write_text(f"# alice left\nbob:{BOB}\n")
            assert await watch.check()
            await _session_started(f"{url}?token={BOB}")
            for revoked in (ALICE, token):
                message, code = await refused(f"{url}?token={revoked}")
                assert (message["code"], code) == ("unauthorized", 4401)
            models = await http.get("/v1/models", headers={"Authorization": f"Bearer {ALICE}"})
            assert models.status_code == 401
            models = await http.get("/v1/models", headers={"Authorization": f"Bearer {BOB}"})
            assert models.status_code == 200
            # alice's running session is still hers alone: the new key may not follow it
            follow = f"{base.replace('http', 'ws')}/v1/sessions/{started['session_id']}/events"
            message, _ = await refused(f"{follow}?token={BOB}")
            assert message["code"] == "not_found"

            # the session that came with the revoked key runs to its end
            await running.send(bytes(3200))
            await running.send(json.dumps({"type": "end_of_stream"}))
            kinds = [json.loads(m)["type"] async for m in running]
            assert kinds[-1] == "session_ended" and running.close_code == 1000


@pytest.mark.parametrize(
    "written", ["bob\n", "# nobody\n", f"bob:{BOB}\nbob:{ALICE}\n", "anonymous:x-123\n"]
)
async def test_a_file_that_would_break_access_is_not_used(start, tmp_path, caplog, written):
    """Malformed, emptied (which would open the server to everyone), a name given twice,
    the reserved name: the keys in use stay, and the log says why."""
    key_file = tmp_path / "keys"
    key_file.write_text(f"bob:{BOB}\n")
    url, server = await start(api_keys_file=key_file)
    key_file.write_text(written)
    with caplog.at_level(logging.ERROR, logger="parley.transport.key_watch"):
        assert not await server.service.keys.check()
    assert "keys in use stay" in caplog.text
    await _session_started(f"{url}?token={BOB}")
    message, code = await refused(url)
    assert (message["code"], code) == ("unauthorized", 4401)


async def test_the_watch_notices_a_change_by_itself(start, tmp_path):
    """Without being asked: the watch's own loop reads the file within its period."""
    key_file = tmp_path / "keys"
    key_file.write_text(f"alice:{ALICE}\n")
    url, server = await start(api_keys_file=key_file)
    watch = server.service.keys
    await watch.stop()
    watch._every_s = 0.05  # the period itself is not what this tests
    watch.start()
    key_file.write_text(f"alice:{ALICE}\nbob:{BOB}\n")
    base = url.replace("ws://", "http://").removesuffix("/v1/stream")
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {BOB}"}) as http:
        for _ in range(100):
            if (await http.get("/v1/models")).status_code == 200:
                break
            await asyncio.sleep(0.05)
    await _session_started(f"{url}?token={BOB}")


def test_new_keys_are_redacted_from_the_logs():
    """A key read again is redacted from every line logged after, the old ones still."""
    handler = logging.StreamHandler()
    handler.addFilter(RedactSecrets([ALICE]))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        redact_also([BOB])
    finally:
        root.removeHandler(handler)
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%s and %s", (ALICE, BOB), None)
    assert handler.filter(record)
    assert record.getMessage() == f"{REDACTED} and {REDACTED}"
