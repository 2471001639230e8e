"""The diarization threads: they own the speaker models and step every session.

A session has at most one step queued or running, so its ``StreamDiarizer``
(``parley.core.stream_diarizer``) is touched by one thread at a time. Each step returns
an immutable ``TimelineSnapshot`` that the session reads on the event loop, so no state
is shared across threads. A thread takes the steps that are due together (up to
``max_batch``) and segments their windows in one forward pass; each session's
embeddings and linking then follow, and its future is answered as soon as its own
step is done. A stream's last step also gives the timeline of its closing relabel
(``speaker_relabel.closing_timeline``), and a step at each of its checkpoints clusters
the windows kept so far.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from parley.core.audio import SAMPLE_RATE
from parley.core.speaker_count import SpeakerCount
from parley.core.speaker_relabel import closing_timeline, relabel
from parley.core.stream_diarizer import DiarizationConfig, SpeakerModel, StreamDiarizer

log = logging.getLogger(__name__)

# Queue priorities: a step a final waits for (``urgent``) before the routine steps, and a
# thread's end marker after every step queued.
URGENT, ROUTINE, LAST = 0, 1, 2

# Due steps segmented in one pass. The segmentation costs 20 ms a window alone and 14 ms
# a window in fours and in tens on one core of this CPU (bench/VARIANTS.md, "Speaker
# labelling", steps per second): past four, a bigger batch only delays the first.
MAX_BATCH = 4


@dataclass
class DiarizationStats:
    """What the diarization threads have done: steps, failures, busy seconds (all threads
    together); and apart, the steps of a stream in its steady state, over a whole window
    with every speaker embedded, which admission measures a stream's cost by: a stream's
    first steps, over a window still growing, and steps thinned under load cost less
    than the steps they stand for (``runtime.capacity``). Their cost is read on the
    worker's ``cost_clock``."""

    steps: int = 0
    failures: int = 0
    busy_seconds: float = 0.0
    full_steps: int = 0
    full_cost_seconds: float = 0.0


@dataclass(frozen=True)
class _Job:
    diarizer: StreamDiarizer
    window: np.ndarray
    window_start: float
    now: float
    final: bool
    thin: bool
    future: concurrent.futures.Future


class DiarizationWorker:
    """``threads`` threads run every session's diarization steps, at most ``capacity``
    queued. ``cost_clock`` is what a steady-state step's cost is read on: the thread's
    CPU time (``time.thread_time``) where the models compute on the calling thread, so
    that a step kept waiting for a core (the ASR thread goes first) is not counted as
    work; wall time where their work runs elsewhere (a GPU, several torch threads)."""

    def __init__(
        self,
        models: SpeakerModel,
        config: DiarizationConfig,
        capacity: int = 64,
        on_thread_start: Callable[[], None] | None = None,
        threads: int = 1,
        max_batch: int = MAX_BATCH,
        cost_clock: Callable[[], float] = time.perf_counter,
    ):
        if threads < 1 or max_batch < 1:
            raise ValueError("a diarization worker needs at least one thread and a batch of one")
        self.models = models
        self.config = config
        self.stats = DiarizationStats()
        self.on_step: Callable[[float], None] | None = None  # told each step's seconds
        self._on_thread_start = on_thread_start
        self._max_batch = max_batch
        self._cost_clock = cost_clock
        # (priority, order, job): urgent steps first, each priority in the order queued
        self._queue: queue.PriorityQueue = queue.PriorityQueue(capacity)
        self._order = itertools.count()
        self._stats_lock = threading.Lock()
        self._urgent = 0  # urgent steps queued or running (under _stats_lock)
        self._live = 0  # every step queued or running (under _stats_lock)
        self._quiet = threading.Condition(self._stats_lock)  # told when _live falls to 0
        self._threads = [
            threading.Thread(target=self._run, name=f"parley-diarization-{i}", daemon=True)
            for i in range(threads)
        ]

    @property
    def threads(self) -> int:
        """How many threads step sessions."""
        return len(self._threads)

    def start(self) -> None:
        """Start the diarization threads."""
        for thread in self._threads:
            thread.start()

    @property
    def urgent_waiting(self) -> int:
        """Steps that finals wait for, queued or running (the ASR thread leaves these
        threads their cores meanwhile: ``threads.ThreadSwitch``)."""
        return self._urgent

    def wait_quiet(self, timeout_s: float) -> None:
        """Wait until no session's step is queued or running, or ``timeout_s`` has passed.
        A recording's speaker work calls it before each window: its threads run at the
        lowest priority, as these do (``threads.lower_priority``), so the live streams'
        steps go first this way, and the recording still gets a window at least every
        ``timeout_s`` when they never stop."""
        with self._quiet:
            self._quiet.wait_for(lambda: self._live == 0, timeout_s)

    @property
    def alive(self) -> bool:
        """Whether every thread runs (False before start and after stop)."""
        return all(thread.is_alive() for thread in self._threads)

    def new_stream(self, count: SpeakerCount = SpeakerCount()) -> StreamDiarizer:
        """A stream's own incremental diarizer, over the shared models, for the ``count``
        of speakers its client gave."""
        return StreamDiarizer(self.models, self.config.for_count(count))

    async def submit(
        self,
        diarizer: StreamDiarizer,
        window: np.ndarray,
        window_start: float,
        now: float,
        final: bool = False,
        thin: bool = False,
        urgent: bool = False,
    ) -> concurrent.futures.Future:
        """Queue one step (``thin``: see ``StreamDiarizer.step``; ``urgent``: a final waits
        for it, so it goes before the routine steps queued); waits while the queue is full
        (each session has at most one step queued, so the wait is short)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        job = _Job(diarizer, window, window_start, now, final, thin, future)
        item = (URGENT if urgent else ROUTINE, next(self._order), job)
        with self._stats_lock:
            self._live += 1
            self._urgent += urgent
        future.add_done_callback(functools.partial(self._done, urgent))  # or cancelled
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            try:
                await asyncio.to_thread(self._queue.put, item)
            except BaseException:
                future.cancel()  # counted out; if it was queued after all, it is skipped
                raise
        return future

    async def stop(self) -> None:
        """Finish the queued steps, then end the threads (one end marker each)."""
        running = [thread for thread in self._threads if thread.is_alive()]
        for _ in running:
            await asyncio.to_thread(self._queue.put, (LAST, next(self._order), None))
        for thread in running:
            await asyncio.to_thread(thread.join)

    def _run(self) -> None:
        if self._on_thread_start is not None:
            self._on_thread_start()
        while True:
            jobs, last = self._take()
            self._step_all([job for job in jobs if job.future.set_running_or_notify_cancel()])
            if last:
                return

    def _take(self) -> tuple[list[_Job], bool]:
        """The next due steps (waiting for one, then whatever else is queued, up to
        ``max_batch``), and whether this thread's end marker came with them."""
        *_, first = self._queue.get()
        if first is None:
            return [], True
        jobs = [first]
        while len(jobs) < self._max_batch:
            try:
                *_, job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
        return jobs, False

    def _step_all(self, jobs: list[_Job]) -> None:
        if not jobs:
            return
        started, cost_from = time.perf_counter(), self._cost_clock()
        segmented = [job for job in jobs if job.diarizer.segments(job.window)]
        try:
            activities = self.models.segment([job.window for job in segmented]) if segmented else []
        except Exception as exc:
            for job in jobs:
                self._fail(job, exc, (time.perf_counter() - started) / len(jobs))
            return
        shared = (time.perf_counter() - started) / len(jobs)  # each step's share of it
        shared_cost = (self._cost_clock() - cost_from) / len(jobs)
        activity_of = {id(job): activity for job, activity in zip(segmented, activities)}
        for job in jobs:
            began, cost_from = time.perf_counter(), self._cost_clock()
            try:
                snapshot = job.diarizer.step(
                    job.window,
                    job.window_start,
                    job.now,
                    job.final,
                    activity_of.get(id(job)),
                    job.thin,
                )
                if job.final and job.diarizer.config.closing_s > 0:
                    # At the end nobody takes over: the labels are numbered afresh.
                    closing = closing_timeline(job.diarizer)
                    log.debug(
                        "closing relabel: %d windows kept, %.2f s apart",
                        len(job.diarizer.kept_windows),
                        job.diarizer.kept_spacing_s,
                    )
                    snapshot = replace(snapshot, closing=closing, taken_over=None)
                elif job.diarizer.relabel_due(job.now):
                    found = relabel(job.diarizer)
                    if found is not None:
                        snapshot = replace(
                            snapshot, closing=found.timeline, taken_over=found.taken_over
                        )
            except Exception as exc:
                self._fail(job, exc, shared + time.perf_counter() - began)
            else:
                job.future.set_result(snapshot)
                cost = shared_cost + self._cost_clock() - cost_from if _steady(job) else None
                self._count(shared + time.perf_counter() - began, cost)

    def _done(self, urgent: bool, _future: concurrent.futures.Future) -> None:
        with self._stats_lock:
            self._live -= 1
            self._urgent -= urgent
            if not self._live:
                self._quiet.notify_all()

    def _fail(self, job: _Job, exc: Exception, spent: float) -> None:
        with self._stats_lock:
            self.stats.failures += 1
            first = self.stats.failures == 1
        if first:  # the sessions tell their clients; log it once
            log.error("a diarization step failed (later failures are counted)", exc_info=exc)
        job.future.set_exception(exc)
        self._count(spent)

    def _count(self, spent: float, steady_cost: float | None = None) -> None:
        """A step that took ``spent`` seconds; ``steady_cost``: a steady-state step's cost
        on the cost clock (None: not one)."""
        with self._stats_lock:
            self.stats.steps += 1
            self.stats.busy_seconds += spent
            if steady_cost is not None:
                self.stats.full_steps += 1
                self.stats.full_cost_seconds += steady_cost
        if self.on_step is not None:
            self.on_step(spent)


def _steady(job: _Job) -> bool:
    """Whether a step is one of a stream's steady state: its whole window, every speaker
    embedded (``DiarizationStats``)."""
    whole = len(job.window) >= int(job.diarizer.config.window_s * SAMPLE_RATE)
    return whole and not job.thin
