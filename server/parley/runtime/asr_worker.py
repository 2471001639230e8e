"""One thread owns the ASR engine; sessions hand it jobs through a bounded priority queue.

Finals outrank partials, and a partial whose segment was finalized meanwhile is
cancelled before it runs. ``submit_final`` waits for room (back-pressure reaches
the client's socket); ``try_submit_partial`` never waits: when the worker is
behind, a partial is simply not asked for.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

log = logging.getLogger(__name__)

FINAL_PRIORITY = 0
PARTIAL_PRIORITY = 1


class Transcriber(Protocol):
    """What the worker needs of an engine (the real one is models.whisper_engine)."""

    def transcribe(self, audio: np.ndarray, *, language: str | None = None,
                   with_words: bool = False, draft: tuple[int, ...] | None = None,
                   context: tuple[int, ...] = ()) -> Any: ...


@dataclass(frozen=True)
class AsrJob:
    audio: np.ndarray
    language: str | None
    with_words: bool
    draft: tuple[int, ...] | None = None  # an earlier hypothesis of this audio's prefix
    context: tuple[int, ...] = ()         # earlier text of the session, as the prompt


@dataclass(order=True)
class _Queued:
    priority: int
    sequence: int
    job: AsrJob = field(compare=False)
    future: concurrent.futures.Future = field(compare=False)


@dataclass
class WorkerStats:
    jobs_done: int = 0
    jobs_failed: int = 0
    batches: int = 0
    batched_jobs: int = 0
    partials_cancelled: int = 0
    busy_seconds: float = 0.0
    audio_seconds: float = 0.0
    drafted: int = 0
    accepted: int = 0
    verify_steps: int = 0


class AsrWorker:
    """Runs jobs one at a time with speculative decoding, or several at once when many wait.

    Speculative decoding pays at batch size one; with a queue, one batched plain pass
    per step serves every waiting job. ``batch_when_waiting`` is the queue length at
    which the worker switches (0: never), ``max_batch`` the most jobs in one batch.
    With ``batch_drafted`` false, a job that carries a draft always runs alone and
    drafted, and only draft-less jobs (a segment's first partial, a short final) are
    batched: on CPU a drafted decode is about as fast as its share of a batch.
    """

    def __init__(self, engine: Transcriber, capacity: int,
                 on_thread_start: Callable[[], None] | None = None,
                 batch_when_waiting: int = 0, max_batch: int = 8,
                 batch_drafted: bool = True):
        if capacity < 2:
            raise ValueError("the ASR queue needs room for at least two jobs")
        self.engine = engine
        self.capacity = capacity
        self.batch_when_waiting = batch_when_waiting if hasattr(engine, "transcribe_batch") else 0
        self.max_batch = max_batch
        self.batch_drafted = batch_drafted
        self.stats = WorkerStats()
        self._queue: queue.PriorityQueue = queue.PriorityQueue()
        self._sequence = itertools.count()
        self._on_thread_start = on_thread_start
        self._thread = threading.Thread(target=self._run, name="parley-asr", daemon=True)
        self._slots: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._in_flight = 0

    # -------------------------------------------------------------- event-loop side

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._slots = asyncio.Semaphore(self.capacity)
        self._thread.start()

    @property
    def backlog(self) -> int:
        """Jobs queued or running."""
        return self._in_flight

    async def submit_final(self, job: AsrJob) -> concurrent.futures.Future:
        assert self._slots is not None, "start() the worker first"
        await self._slots.acquire()
        return self._enqueue(FINAL_PRIORITY, job)

    async def try_submit_partial(self, job: AsrJob) -> concurrent.futures.Future | None:
        assert self._slots is not None, "start() the worker first"
        # Half the room is kept for finals: partials are the first thing to give up.
        if self._in_flight >= self.capacity // 2:
            return None
        await self._slots.acquire()  # cannot wait: fewer than capacity jobs are in flight
        return self._enqueue(PARTIAL_PRIORITY, job)

    def _enqueue(self, priority: int, job: AsrJob) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._in_flight += 1
        future.add_done_callback(self._release_from_any_thread)
        self._queue.put(_Queued(priority, next(self._sequence), job, future))
        return future

    def _release_from_any_thread(self, _future: concurrent.futures.Future) -> None:
        assert self._loop is not None
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._release)

    def _release(self) -> None:
        assert self._slots is not None
        self._in_flight -= 1
        self._slots.release()

    async def stop(self) -> None:
        """Finish queued jobs (cancelling partials), then end the thread."""
        if not self._thread.is_alive():
            return
        self._queue.put(_Queued(PARTIAL_PRIORITY + 1, next(self._sequence), None, None))
        await asyncio.to_thread(self._thread.join)

    # -------------------------------------------------------------- worker thread

    def _run(self) -> None:
        if self._on_thread_start is not None:
            self._on_thread_start()
        while True:
            item: _Queued = self._queue.get()
            if item.job is None:
                return
            if not item.future.set_running_or_notify_cancel():
                self.stats.partials_cancelled += 1
                continue
            batch = self._batch_with(item)
            started = time.perf_counter()
            if len(batch) > 1:
                self._run_batch(batch)
            else:
                self._run_one(item)
            self.stats.busy_seconds += time.perf_counter() - started
            self.stats.audio_seconds += sum(len(b.job.audio) for b in batch) / 16000

    def _batch_with(self, first: _Queued) -> list[_Queued]:
        """``first``, plus the waiting jobs it can share a batch with when the queue is long."""
        if not self.batch_when_waiting or self._queue.qsize() < self.batch_when_waiting:
            return [first]
        if not self._batchable(first.job) or first.job.language is None and getattr(
                self.engine, "multilingual", False):
            return [first]
        batch, put_back = [first], []
        while len(batch) < self.max_batch:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            compatible = (item.job is not None and self._batchable(item.job)
                          and item.job.language == first.job.language)
            if not compatible:
                put_back.append(item)
            elif item.future.set_running_or_notify_cancel():
                batch.append(item)
            else:
                self.stats.partials_cancelled += 1
        for item in put_back:
            self._queue.put(item)
        return batch

    def _batchable(self, job: AsrJob) -> bool:
        return not job.context and (self.batch_drafted or not job.draft)

    def _run_one(self, item: _Queued) -> None:
        job = item.job
        try:
            result = self.engine.transcribe(job.audio, language=job.language,
                                            with_words=job.with_words, draft=job.draft,
                                            context=job.context)
        except Exception as exc:  # the session turns it into an error message
            log.exception("transcription failed")
            self.stats.jobs_failed += 1
            item.future.set_exception(exc)
            return
        self._done(item, result)

    def _run_batch(self, batch: list[_Queued]) -> None:
        try:
            results = self.engine.transcribe_batch(
                [b.job.audio for b in batch], language=batch[0].job.language,
                with_words=[b.job.with_words for b in batch])
        except Exception as exc:
            log.exception("batched transcription failed")
            self.stats.jobs_failed += len(batch)
            for item in batch:
                item.future.set_exception(exc)
            return
        self.stats.batches += 1
        self.stats.batched_jobs += len(batch)
        for item, result in zip(batch, results):
            self._done(item, result)

    def _done(self, item: _Queued, result) -> None:
        self.stats.jobs_done += 1
        decode_stats = getattr(result, "stats", None)
        if decode_stats is not None:
            self.stats.drafted += decode_stats.drafted
            self.stats.accepted += decode_stats.accepted
            self.stats.verify_steps += decode_stats.verify_steps
        item.future.set_result(result)
