"""Blocking model work, off the event loop, on threads that end with it; the model
threads' priority, and the ASR thread's torch threads switched by the finals in hand."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from parley.core.policy import LOWEST_NICE, AsrThreads, Priority

T = TypeVar("T")

log = logging.getLogger(__name__)


async def in_passing_thread(function: Callable[..., T], *args: Any) -> T:
    """Run blocking model work on a thread of its own that ends with it.

    torch leaves an OpenMP thread team on every thread that ran it with several
    threads; a pool thread would keep its team alive, and with more live OpenMP
    threads than cores libgomp stops spin-waiting, which made diarization steps 2.3
    times slower here. So only the model threads keep teams."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not done.done():  # the awaiting coroutine may have been cancelled (Ctrl-C)
            outcome()

    def run() -> None:
        try:
            result = function(*args)
        except BaseException as exc:  # handed to the awaiting coroutine
            loop.call_soon_threadsafe(settle, functools.partial(done.set_exception, exc))
        else:
            loop.call_soon_threadsafe(settle, functools.partial(done.set_result, result))

    thread = threading.Thread(target=run, name="parley-load", daemon=True)
    thread.start()
    try:
        return await done
    finally:
        # Returned only once the thread is gone: a process that exits while one still
        # unwinds native code (its OpenMP team) aborts ("terminate called without an
        # active exception"), as `parley transcribe` did under load.
        await loop.run_in_executor(None, thread.join)


def lower_priority(priority: Priority) -> None:
    """Give the calling thread (Linux: a thread has its own) a lower CPU priority: a nice
    value (0 leaves it as it is), or IDLE, Linux's SCHED_IDLE (elsewhere the lowest nice
    value). A thread under SCHED_IDLE runs only on a core no other thread wants, and a
    thread that wakes takes the core from it at once: at a nice value it still took
    turns with the ASR thread's OpenMP threads, and each turn stalled both of them
    (bench/VARIANTS.md, "Speaker threads that only take idle cores"). Lowering one's own
    priority needs no privilege; where the system refuses anyway, the thread runs at par.
    The threads it starts inherit it."""
    thread = threading.get_native_id()
    with contextlib.suppress(OSError):
        if isinstance(priority, int):
            if priority > 0:
                os.setpriority(os.PRIO_PROCESS, thread, priority)
        elif hasattr(os, "SCHED_IDLE"):
            os.sched_setscheduler(thread, os.SCHED_IDLE, os.sched_param(0))
        else:
            os.setpriority(os.PRIO_PROCESS, thread, LOWEST_NICE)


class ThreadSwitch:
    """Called on the ASR thread with the finals in hand each round and before each
    encoder pass of finals (a burst's passes run in one round): sets that thread's
    torch threads as ``plan`` chooses, only when its choice changes (``set_threads``:
    ``models.device.set_threads``; the count is the calling thread's own).

    No burst while ``held()`` (the speaker threads' steps that finals wait for, queued
    or running: ``DiarizationWorker.urgent_waiting``): they run at a lower priority, and
    an ASR thread on every core would starve the very steps its next finals need."""

    def __init__(self, plan: AsrThreads, set_threads: Callable[[int], None]):
        self.plan = plan
        self.held: Callable[[], bool] = lambda: False
        self._set_threads = set_threads
        self._threads = plan.base  # what the thread was started with

    def __call__(self, finals: int) -> None:
        threads = self.plan.for_finals(finals)
        if threads > self.plan.base and self.held():
            threads = self.plan.base
        if threads != self._threads:
            self._set_threads(threads)
            self._threads = threads
            log.debug("the ASR thread computes on %d threads (%d finals in hand)", threads, finals)
