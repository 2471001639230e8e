"""One thread owns the ASR engine and advances every stream's decodes together, step by step.

Sessions submit ``AsrRequest``s and get futures back. The thread keeps a set of
decodes in flight and, between decoder steps, lets new ones join and finished ones
leave (continuous batching):

- **finals first**: waiting finals are admitted before any step or partial (taking a
  partial's row if none is free), unless the finals decoding now are about to be done
  (within one encoder pass: they finish first); a final never waits for a running
  partial: at the next step boundary it joins the batch, and partials pause until no
  final decodes;
- **drafts by cost**: every step, each row's draft budget comes from the measured
  step cost and the row's measured acceptance (``core.policy.draft_budgets``);
- **shared encoder passes** where they are cheaper per clip (``encoder_batch_size``);
- **partials by load**: a session asks for a partial at most every
  ``partial_interval()``, which stretches evenly for all streams when finals leave
  little spare time (``PartialPacing``); a cancelled partial leaves at the next step;
- **recordings in the background**: a file's windows (``submit_background``) join
  one per round (a final never waits behind more than one window's encoder pass),
  only when no final waits or decodes and no partial waits, and step only while no
  live request decodes; a final that finds every row taken takes a background row, and that
  window starts again later. Several files take turns, window by window.

Back-pressure: at most ``capacity`` live requests are queued or in flight;
``submit_final`` waits for room (the client's socket slows down),
``try_submit_partial`` never waits. Background windows are bounded by their callers
(each file job keeps a few in flight) and never take a live request's room.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from parley.core.asr import AsrRequest, Decode, Transcriber
from parley.core.costs import Acceptance, EncoderCosts, StepCostModel
from parley.core.load import LoadLedger
from parley.core.policy import (
    PartialPacing,
    draft_budgets,
    encoder_batch_size,
    finish_decoding_first,
    remaining_steps,
)
from parley.runtime.calibration import calibrate
from parley.runtime.scheduler_stats import SchedulerObserver, SchedulerStats

log = logging.getLogger(__name__)

# Seconds of a step (fixed, per row, per position fed) before any is timed: a small
# CPU's figures; the warm-up and the first steps replace them.
STEP_COST_PRIOR = (0.010, 0.001, 0.0005)
_STOP = object()


@dataclass(eq=False)
class _Job:
    request: AsrRequest
    future: concurrent.futures.Future
    final: bool
    submitted: float
    owner: object = None  # a background job's file (None: a live request)
    decode: Decode | None = None
    acceptance: Acceptance = field(default_factory=Acceptance)
    cost: float = 0.0  # worker seconds spent on it so far
    admitted: float = 0.0
    steps: int = 0
    produced: int = 0  # tokens the steps gave it (its first one and end of text aside)

    @property
    def running(self) -> Decode:
        """The decode of an active job (every active job has started one)."""
        assert self.decode is not None
        return self.decode


class AsrScheduler:
    """The ASR thread: every session's and recording's decodes, batched step by step."""

    def __init__(
        self,
        engine: Transcriber,
        capacity: int,
        *,
        target_busy: float = PartialPacing.target_busy,
        on_thread_start: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        if capacity < 2:
            raise ValueError("the ASR queue needs room for at least two requests")
        self.engine = engine
        self.capacity = capacity
        self.pacing = PartialPacing(target_busy=target_busy)
        self.stats = SchedulerStats()
        self.observer: SchedulerObserver | None = None  # may be set at any time
        self.step_cost = StepCostModel(prior=STEP_COST_PRIOR)
        self.encoder_cost = EncoderCosts()
        self._clock = clock
        self._on_thread_start = on_thread_start
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()  # bounded by the slots below
        self._thread = threading.Thread(target=self._run, name="parley-asr", daemon=True)
        self._ready = threading.Event()
        self._warm_up = False
        self._warm_up_error: Exception | None = None
        # Written by the event loop only:
        self._slots: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._in_flight = 0
        self._finals_submitted = 0
        self._partial_streams = 0
        # Written by the worker thread only:
        self._finals_taken = 0  # finals taken off the line: started, failed or cancelled
        self._ledger = LoadLedger(clock())
        self._finals: deque[_Job] = deque()
        self._partials: deque[_Job] = deque()
        self._background: dict[object, deque[_Job]] = {}  # per file, taken in turn
        self._active: list[_Job] = []
        self._stopping = False

    # ================================================================ event-loop side

    async def start(self, warm_up: bool = False) -> None:
        """Start the thread; with ``warm_up``, wait until it has timed the engine (an
        engine that fails its warm-up raises here, and the thread ends)."""
        self._loop = asyncio.get_running_loop()
        self._slots = asyncio.Semaphore(self.capacity)
        self._warm_up = warm_up
        self._thread.start()
        await asyncio.to_thread(self._ready.wait)
        if self._warm_up_error is not None:
            raise RuntimeError(
                f"the ASR engine failed its warm-up: {self._warm_up_error}"
            ) from self._warm_up_error

    @property
    def alive(self) -> bool:
        """The thread runs and takes work (False before start, after stop or a fault)."""
        return self._thread.is_alive() and not self._stopping

    @property
    def backlog(self) -> int:
        """Requests queued or being decoded."""
        return self._in_flight

    @property
    def live_finals_cost_s(self) -> float:
        """Worker seconds every live final has cost so far (admission measures by it)."""
        return self._ledger.finals_cost_total

    def busy_fraction(self) -> float:
        """Fraction of the last seconds (about ``core.load.LOAD_WINDOW_S``) the thread
        worked."""
        return self._ledger.load.busy.rate(self._clock())

    async def submit_final(self, request: AsrRequest) -> concurrent.futures.Future:
        """Queue a final; waits while ``capacity`` requests are in flight."""
        assert self._slots is not None, "start() the scheduler first"
        await self._slots.acquire()
        self._finals_submitted += 1
        return self._enqueue(request, final=True)

    async def try_submit_partial(self, request: AsrRequest) -> concurrent.futures.Future | None:
        """Queue a partial if it cannot delay a final: none waits, and half the room is
        kept for finals. Returns None (never waits) otherwise."""
        assert self._slots is not None, "start() the scheduler first"
        if self._finals_submitted > self._finals_taken or self._in_flight >= self.capacity // 2:
            self.stats.partials_refused += 1
            return None
        await self._slots.acquire()  # cannot wait: fewer than capacity are in flight
        return self._enqueue(request, final=False)

    def want_partials(self, change: int) -> None:
        """A stream opened (+1) or closed (-1) a segment that wants partials."""
        self._partial_streams = max(0, self._partial_streams + change)

    def partial_interval(self, base_s: float) -> float:
        """Seconds a stream should leave between its partials now (at least ``base_s``)."""
        load = self._ledger.load
        return self.pacing.interval(
            base_s, self._partial_streams, load.partial_cost_s, load.finals.rate(self._clock())
        )

    def _enqueue(self, request: AsrRequest, final: bool) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._in_flight += 1
        future.add_done_callback(self._release_from_any_thread)
        self._inbox.put(_Job(request, future, final, self._clock()))
        return future

    def submit_background(self, request: AsrRequest, owner: object) -> concurrent.futures.Future:
        """Queue a recording's window behind every live request (``owner``: its file, so
        that files take turns). Never waits: the caller bounds what it has in flight."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._inbox.put(_Job(request, future, False, self._clock(), owner=owner))
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
        """Finish queued and running finals (partials are cancelled), then end the thread."""
        if self._thread.is_alive():
            self._inbox.put(_STOP)
            await asyncio.to_thread(self._thread.join)

    # ================================================================ worker thread

    def warm_up(self) -> None:
        """Time the engine before serving (``start(warm_up=True)`` runs it on the thread
        that will decode; benchmarks may call it directly)."""
        calibrate(self.engine, self.step_cost, self.encoder_cost, self._clock)

    def _run(self) -> None:
        if self._on_thread_start is not None:
            self._on_thread_start()
        try:
            if self._warm_up:
                self.warm_up()
        except Exception as exc:
            log.exception("the ASR engine failed its warm-up")
            self._warm_up_error = exc
            return
        finally:
            self._ready.set()
        while self._take(
            block=not (self._active or self._finals or self._partials or self._background)
        ):
            try:
                self._discard_cancelled()
                self._admit()
                if self._active:
                    self._step()
            except Exception as exc:  # a fault of ours: no request may wait forever on it
                log.exception("the ASR scheduler failed; its requests end with an error")
                self._fail_everything(exc)

    def _fail_everything(self, exc: Exception) -> None:
        for job in list(self._active):
            self._active.remove(job)
            try:
                self.engine.drop(job.decode)
            except Exception:
                log.exception("could not drop a decode")
            self._fail(job, exc)
        for line in (self._finals, self._partials):
            while line:
                job = line.popleft()
                self._finals_taken += job.final
                self._fail(job, exc)

    def _take(self, block: bool) -> bool:
        """Move submitted jobs into the waiting lines; False once stopped and drained."""
        try:
            item = self._inbox.get(block=block and not self._stopping)
            while True:
                if item is _STOP:
                    self._stopping = True
                elif item.owner is not None:
                    self._background.setdefault(item.owner, deque()).append(item)
                else:
                    (self._finals if item.final else self._partials).append(item)
                item = self._inbox.get_nowait()
        except queue.Empty:
            pass
        if self._stopping:
            for job in [*self._partials, *(j for line in self._background.values() for j in line)]:
                job.future.cancel()
            self._partials.clear()
            self._background.clear()
            for job in [j for j in self._active if not j.final]:
                self._leave(job)
                job.future.cancel()
        return not (self._stopping and not self._finals and not self._active)

    def _discard_cancelled(self) -> None:
        for line in (self._finals, self._partials, *self._background.values()):
            for job in [j for j in line if j.future.cancelled()]:
                line.remove(job)
                self.stats.partials_cancelled += not job.final
                self._finals_taken += job.final
        for job in [j for j in self._active if j.future.cancelled()]:
            self._leave(job)
            self.stats.partials_cancelled += not job.final

    def _admit(self) -> None:
        """Waiting finals join now (unless the finals decoding are about to be done);
        partials join only when no final waits or decodes."""
        while self._finals and not finish_decoding_first(
            self._remaining_seconds(), self.encoder_cost(1)
        ):
            free = self.engine.max_rows - len(self._active)
            if free == 0 and not self._evict_partial():
                return  # every row decodes a final: the next one joins when one leaves
            free = self.engine.max_rows - len(self._active)
            count = encoder_batch_size(min(len(self._finals), free), self.encoder_cost.known)
            self._start([self._finals.popleft() for _ in range(count)])
            self._finals_taken += count
            self._take(block=False)  # finals that came meanwhile join this round
        free = self.engine.max_rows - len(self._active)
        if any(j.final for j in self._active):
            return  # a partial's encoder pass would hold up the finals' steps
        if self._partials and free > 0:
            count = encoder_batch_size(min(len(self._partials), free), self.encoder_cost.known)
            self._start([self._partials.popleft() for _ in range(count)])
            return
        # One window per round: a window's encoder pass is a full 30 s one, and a final
        # that comes meanwhile waits for it, so background passes are never batched.
        if self._background and len(self._active) < self.engine.max_rows and not self._finals:
            self._start([self._next_background()])

    def _next_background(self) -> _Job:
        """The next window of the file whose turn it is (files take turns)."""
        owner = next(iter(self._background))
        line = self._background.pop(owner)
        job = line.popleft()
        if line:
            self._background[owner] = line  # to the back of the turn order
        return job

    def _remaining_seconds(self) -> list[float]:
        """How long each final decoding now still needs, steps and finish, by estimate."""
        finals = [j for j in self._active if j.final]
        step = self.step_cost(len(finals), len(finals))
        remaining = []
        for job in finals:
            expected = max(
                len(job.request.draft or ()), self._ledger.tokens_per_second * job.request.seconds
            )
            steps = remaining_steps(job.produced, job.steps, expected, job.running.drafting)
            remaining.append(steps * step + self._ledger.finish_seconds)
        return remaining

    def _start(self, jobs: list[_Job]) -> None:
        began = self._clock()
        try:
            decodes = self.engine.start([j.request for j in jobs])
        except Exception as exc:
            if len(jobs) > 1:  # find the one that failed: the others deserve their results
                for job in jobs:
                    self._start([job])
                return
            self._work(self._clock() - began)
            log.warning("could not start a decode: %s", exc)
            self._fail(jobs[0], exc)
            return
        spent = self._work(self._clock() - began)
        log.debug(
            "started %d %s in %.3f s", len(jobs), "finals" if jobs[0].final else "partials", spent
        )
        self.encoder_cost.observe(len(jobs), spent)
        self.stats.encoder_passes += 1
        self.stats.encoded_clips += len(jobs)
        for job, decode in zip(jobs, decodes):
            job.decode = decode
            job.admitted = began
            job.cost += spent / len(jobs)
            self._active.append(job)
        self._finish_done()

    def _step(self) -> None:
        # Partials pause while finals decode, and recordings while either does: each row
        # a step carries costs time (on a small CPU about a quarter of a one-row step),
        # and live work comes first.
        jobs = (
            [j for j in self._active if j.final]
            or [j for j in self._active if j.owner is None]
            or list(self._active)
        )
        acceptance = [j.acceptance.probability if j.running.drafting else None for j in jobs]
        budgets = draft_budgets(acceptance, self.step_cost, self.engine.max_draft)
        began = self._clock()
        try:
            reports = self.engine.step([j.running for j in jobs], budgets)
        except Exception as exc:
            self._work(self._clock() - began)
            log.exception("a decoder step failed; its %d decodes end with an error", len(jobs))
            for job in jobs:
                self._leave(job)
                self._fail(job, exc)
            return
        spent = self._work(self._clock() - began)
        tokens = sum(r.width for r in reports)
        self.step_cost.observe(len(jobs), tokens, spent)
        stats = self.stats
        stats.steps += 1
        stats.rows_stepped += len(jobs)
        if self.observer is not None:
            self.observer.stepped(len(jobs))
        stats.tokens_fed += tokens
        for job, report in zip(jobs, reports):
            job.cost += spent * report.width / tokens
            job.steps += 1
            job.produced += 1 + report.accepted
            job.acceptance.observe(report.proposed, report.accepted)
            stats.drafted += report.proposed
            stats.accepted += report.accepted
        self._finish_done()

    def _finish_done(self) -> None:
        for job in [j for j in self._active if j.running.finished]:
            self._active.remove(job)
            began = self._clock()
            try:
                result = self.engine.finish(job.running)
            except Exception as exc:
                job.cost += self._work(self._clock() - began)
                log.exception("a finished decode could not be turned into a result")
                self._fail(job, exc)
                continue
            finished_in = self._work(self._clock() - began)
            job.cost += finished_in
            if job.owner is None:  # the live load paces partials; files do not count in it
                self._ledger.decoded(job.final, job.cost, self._clock())
            if job.final:
                self._ledger.final_done(job.request.seconds, len(result.tokens), finished_in)
            self.stats.jobs_done += 1
            log.debug(
                "%s of %.1f s: waited %.3f s, done after %.3f s, cost %.3f s, %d steps, "
                "%d in flight",
                "final" if job.final else "partial",
                job.request.seconds,
                job.admitted - job.submitted,
                self._clock() - job.submitted,
                job.cost,
                job.steps,
                len(self._active),
            )
            self.stats.audio_seconds += job.request.seconds
            if self.observer is not None and job.owner is None:
                self.observer.decoded(
                    job.final, job.admitted - job.submitted, self._clock() - job.admitted
                )
            if job.future.set_running_or_notify_cancel():
                job.future.set_result(result)
            else:
                self.stats.partials_cancelled += not job.final

    def _evict_partial(self) -> bool:
        """Give the least advanced partial's row to a final, else a background window's
        (which goes back to the front of its file's line); False if there is neither."""
        partials = [j for j in self._active if not j.final and j.owner is None]
        if partials:
            job = min(partials, key=lambda j: j.cost)
            self._leave(job)
            job.future.cancel()
            self.stats.partials_evicted += 1
            return True
        background = [j for j in self._active if j.owner is not None]
        if not background:
            return False
        job = min(background, key=lambda j: j.cost)
        self._leave(job)
        job.decode, job.cost, job.steps, job.produced = None, 0.0, 0, 0
        job.acceptance = Acceptance()
        self._background.setdefault(job.owner, deque()).appendleft(job)
        self.stats.background_evicted += 1
        return True

    def _leave(self, job: _Job) -> None:
        """Take a decode out of the batch without a result."""
        self._active.remove(job)
        self.engine.drop(job.decode)
        if job.owner is None:
            self._ledger.decoded(job.final, job.cost, self._clock())

    def _fail(self, job: _Job, exc: Exception) -> None:
        self.stats.jobs_failed += 1
        if job.future.set_running_or_notify_cancel():
            job.future.set_exception(exc)

    def _work(self, seconds: float) -> float:
        self.stats.busy_seconds += seconds
        self._ledger.worked(seconds, self._clock())
        return seconds
