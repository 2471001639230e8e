"""A TCP proxy on loopback that injects faults between a client and a server: it adds
latency, stalls, and cuts connections after a chosen number of bytes, wherever that
falls (mid-frame included), with no close handshake. Debian's toxiproxy is not
packaged for this release, so this is a small asyncio one."""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass, field


@dataclass
class Faults:
    latency_s: float = 0.0  # added to every chunk, each way
    cut_after: list[int] = field(default_factory=list)  # client→server bytes of each
    #                                  connection, in turn, after which both ends are cut
    stall_s: float = 0.0  # a pause in reading, once per connection, mid-way
    seed: int = 0


class FaultProxy:
    """``async with FaultProxy(port, faults) as proxy:`` listens on ``proxy.port``."""

    def __init__(self, upstream_port: int, faults: Faults):
        self._upstream = upstream_port
        self._faults = faults
        self._random = random.Random(faults.seed)
        self._server: asyncio.AbstractServer | None = None
        self.connections = 0
        self.cuts = 0
        self._tasks: set[asyncio.Task] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def __aenter__(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        index = self.connections
        self.connections += 1
        cut = self._faults.cut_after[index] if index < len(self._faults.cut_after) else None
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream)
        done = asyncio.Event()

        def abort() -> None:
            for w in (writer, up_writer):
                w.transport.abort()
            done.set()

        async def pipe(src, dst, budget: int | None, stall_at: int | None) -> None:
            moved = 0
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                while data := await src.read(4096):
                    if budget is not None and moved + len(data) >= budget:
                        dst.write(data[: budget - moved])  # the rest is lost with the cut
                        self.cuts += 1
                        abort()
                        return
                    if stall_at is not None and moved >= stall_at:
                        stall_at = None
                        await asyncio.sleep(self._faults.stall_s)
                    if self._faults.latency_s:
                        await asyncio.sleep(self._faults.latency_s)
                    dst.write(data)
                    await dst.drain()
                    moved += len(data)
            done.set()

        stall = self._random.randrange(1, 50_000) if self._faults.stall_s else None
        pipes = [
            asyncio.create_task(pipe(reader, up_writer, cut, stall)),
            asyncio.create_task(pipe(up_reader, writer, None, None)),
        ]
        try:
            await done.wait()
        finally:
            for p in pipes:
                p.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
            for w in (writer, up_writer):
                w.transport.abort()
            self._tasks.discard(task)
