"""The diarization thread: one thread owns the speaker models and steps every session.

Each session's ``StreamDiarizer`` (``parley.core.stream_diarizer``) is touched only
by this thread. Each step returns an immutable ``TimelineSnapshot`` that the session
reads on the event loop, so no state is shared across threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from parley.core.stream_diarizer import DiarizationConfig, SpeakerModel, StreamDiarizer

log = logging.getLogger(__name__)


@dataclass
class DiarizationStats:
    """What the diarization thread has done: steps, failures, busy seconds."""

    steps: int = 0
    failures: int = 0
    busy_seconds: float = 0.0


@dataclass(frozen=True)
class _Job:
    diarizer: StreamDiarizer
    window: np.ndarray
    window_start: float
    now: float
    final: bool
    future: concurrent.futures.Future


class DiarizationWorker:
    """One thread runs every session's diarization steps, at most ``capacity`` queued."""

    def __init__(
        self,
        models: SpeakerModel,
        config: DiarizationConfig,
        capacity: int = 64,
        on_thread_start: Callable[[], None] | None = None,
    ):
        self.models = models
        self.config = config
        self.stats = DiarizationStats()
        self.on_step: Callable[[float], None] | None = None  # told each step's seconds
        self._on_thread_start = on_thread_start
        self._queue: queue.Queue = queue.Queue(capacity)
        self._thread = threading.Thread(target=self._run, name="parley-diarization", daemon=True)

    def start(self) -> None:
        """Start the diarization thread."""
        self._thread.start()

    @property
    def alive(self) -> bool:
        """Whether the thread runs (False before start and after stop)."""
        return self._thread.is_alive()

    def new_stream(self) -> StreamDiarizer:
        """A stream's own incremental diarizer, over the shared models."""
        return StreamDiarizer(self.models, self.config)

    async def submit(
        self,
        diarizer: StreamDiarizer,
        window: np.ndarray,
        window_start: float,
        now: float,
        final: bool = False,
    ) -> concurrent.futures.Future:
        """Queue one step; waits while the queue is full (each session has at most one
        step queued, so the wait is short)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        job = _Job(diarizer, window, window_start, now, final, future)
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            await asyncio.to_thread(self._queue.put, job)
        return future

    async def stop(self) -> None:
        """Finish the queued steps, then end the thread."""
        if self._thread.is_alive():
            await asyncio.to_thread(self._queue.put, None)
            await asyncio.to_thread(self._thread.join)

    def _run(self) -> None:
        if self._on_thread_start is not None:
            self._on_thread_start()
        while (job := self._queue.get()) is not None:
            if not job.future.set_running_or_notify_cancel():
                continue
            started = time.perf_counter()
            try:
                snapshot = job.diarizer.step(job.window, job.window_start, job.now, job.final)
            except Exception as exc:
                self.stats.failures += 1
                if self.stats.failures == 1:  # the sessions tell their clients; log it once
                    log.exception("a diarization step failed (later failures are counted)")
                job.future.set_exception(exc)
            else:
                job.future.set_result(snapshot)
            finally:
                spent = time.perf_counter() - started
                if self.on_step is not None:
                    self.on_step(spent)
                self.stats.steps += 1
                self.stats.busy_seconds += spent
