"""The API key file, read again when it changes, so that keys are added, rotated and
revoked without a restart (and without ending the sessions that run).

The file is checked every few seconds by its modification time, size and inode, which
also catches a Kubernetes Secret's volume, updated by swapping a symlink. What a new
file gives replaces the keys at once: new connections, uploads, token requests and
resumes are judged by it. Sessions already running go on to their end, whichever key
they came with. A file that cannot be read, is malformed, or would leave a server that
had keys with none, is refused with an error in the log, and the keys in use stay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from parley.logs import redact_also
from parley.transport.admission import Access
from parley.transport.auth import ApiKeys

log = logging.getLogger(__name__)

CHECK_EVERY_S = 5.0


def watch_keys(access: Access) -> KeyWatch | None:
    """The watch of ``access``'s key file (None when its keys came from none)."""
    if access.key_file is None or access.read_keys is None:
        return None
    return KeyWatch(access.key_file, access, access.read_keys, redact_also)


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """What changes when the file does (None: it cannot be seen now)."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_mtime_ns, found.st_size, found.st_ino


class KeyWatch:
    """Replaces ``access.keys`` with what ``read`` gives each time ``path`` changes;
    ``secrets``: told every new key's value (the log filter redacts them) before any
    client may use it."""

    def __init__(
        self,
        path: Path,
        access: Access,
        read: Callable[[], ApiKeys],
        secrets: Callable[[Iterable[str]], None],
        every_s: float = CHECK_EVERY_S,
    ):
        self._path = path
        self._access = access
        self._read = read
        self._secrets = secrets
        self._every_s = every_s
        # The file the keys in use were read from: not known (they were read before the
        # models loaded), so the first check reads it again.
        self._seen: tuple[int, int, int] | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._every_s)
            await self.check()

    async def check(self) -> bool:
        """Read the file again if it changed since it was last read; whether the keys
        were replaced."""
        stamp = await asyncio.to_thread(_stamp, self._path)
        if stamp is None or stamp == self._seen:
            return False
        self._seen = stamp  # a refused file is reported once, not at every check
        before = self._access.keys
        try:
            keys = await asyncio.to_thread(self._read)
        except (OSError, ValueError) as exc:
            log.error("API key file not used, the keys in use stay: %s", exc)
            return False
        if keys == before:
            return False
        if before.required and not keys.required:
            log.error(
                "API key file not used, the keys in use stay: %s holds no key, and a "
                "server with keys is not opened to everyone while it runs",
                self._path,
            )
            return False
        self._secrets(keys.values)
        self._access.keys = keys
        added, removed = keys.names - before.names, before.names - keys.names
        changed = {n for n in keys.names & before.names if keys.secret_of(n) != before.secret_of(n)}
        log.info(
            "API keys read again from %s: %d in use; added %s, removed %s, changed %s",
            self._path,
            len(keys.names),
            ", ".join(sorted(added)) or "none",
            ", ".join(sorted(removed)) or "none",
            ", ".join(sorted(changed)) or "none",
        )
        return True
