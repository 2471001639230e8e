"""The sessions an endpoint serves now: what admission counts, what the measured
capacity calls the load, and what a drain waits for and a shutdown cancels."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from parley.runtime.capacity import LiveLoad
from parley.sessions.streams import Stream


class LiveSessions:
    """Each live session's handler task and its stream (the endpoint's only state)."""

    def __init__(self) -> None:
        self._streams: dict[asyncio.Task, Stream] = {}

    def __len__(self) -> int:
        return len(self._streams)

    @contextlib.contextmanager
    def serving(self, task: asyncio.Task, stream: Stream) -> Iterator[None]:
        """Count ``task`` (serving ``stream``) live until it leaves the block."""
        self._streams[task] = stream
        try:
            yield
        finally:
            self._streams.pop(task, None)

    def load(self) -> LiveLoad:
        """The live streams: a meeting's participants count one each."""
        streams = diarized = 0
        for stream in self._streams.values():
            streams += stream.counted_streams
            diarized += stream.config.diarization
        return LiveLoad(streams, diarized)

    async def wait(self, timeout_s: float) -> None:
        """Until every live session has ended, or ``timeout_s``."""
        if self._streams:
            await asyncio.wait(set(self._streams), timeout=timeout_s)

    async def cancel(self) -> None:
        """End every live session's handler now, and wait for them."""
        tasks = list(self._streams)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
