"""One thread owns the ASR engine and advances every stream's decodes together, step by step.

Sessions submit ``AsrRequest``s and get futures back. The thread keeps a set of
decodes in flight and, between decoder steps, lets new ones join and finished ones
leave (continuous batching):

- **finals first**: waiting finals are admitted before any step or partial (taking a
  partial's row if none is free), unless the finals decoding now are about to be done
  (within one encoder pass: they finish first; a final so held back a whole pass joins
  anyway, the estimate having failed); a final never waits for a running
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
from collections.abc import Callable
from dataclasses import replace

from parley.core.asr import AsrRequest, Transcriber
from parley.core.costs import EncoderCosts, StepCostModel
from parley.core.load import LoadLedger
from parley.core.policy import SHORT_FINALS_BUSY, PartialPacing
from parley.workers.calibration import calibrate
from parley.workers.decode_job import Job
from parley.workers.decode_rounds import STOP, DecodeRounds
from parley.workers.scheduler_stats import SchedulerObserver, SchedulerStats
from parley.workers.threads import ThreadSwitch

log = logging.getLogger(__name__)

# Seconds of a step (fixed, per row, per position fed) before any is timed: a small
# CPU's figures; the warm-up and the first steps replace them.
STEP_COST_PRIOR = (0.010, 0.001, 0.0005)


class AsrScheduler:
    """The ASR thread: every session's and recording's decodes, batched step by step."""

    def __init__(
        self,
        engine: Transcriber,
        capacity: int,
        *,
        target_busy: float = PartialPacing.target_busy,
        short_finals: bool = False,
        short_finals_busy: float = SHORT_FINALS_BUSY,
        on_thread_start: Callable[[], None] | None = None,
        threads: ThreadSwitch | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        if capacity < 2:
            raise ValueError("the ASR queue needs room for at least two requests")
        self.engine = engine
        self.capacity = capacity
        self.pacing = PartialPacing(target_busy=target_busy)
        # Finals and recordings' windows over the engine's short encoder windows too, not
        # only partials (models/encoder.py): cheaper, and their words move (bench/README).
        self.short_finals = short_finals
        # Real-time clients' finals over short windows once finals alone keep the thread
        # this busy (of the last LOAD_WINDOW_S): under load they would fall behind over
        # whole windows. 1.0: never (one thread's share reaches it only when always busy).
        self.short_finals_busy = short_finals_busy
        self.stats = SchedulerStats()
        self._clock = clock
        self._on_thread_start = on_thread_start
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()  # bounded by the slots below
        # Written by the worker thread only:
        self._rounds = DecodeRounds(
            engine,
            self._inbox,
            self.stats,
            LoadLedger(clock()),
            StepCostModel(prior=STEP_COST_PRIOR),
            EncoderCosts(),
            clock,
        )
        self.threads = threads  # told the finals in hand each round
        if threads is not None:
            self._rounds.on_finals = threads
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

    # The costs the thread measures (a benchmark may hand over a warmed-up pair), and who
    # is told of each step and decode (may be set at any time).
    @property
    def step_cost(self) -> StepCostModel:
        return self._rounds.step_cost

    @step_cost.setter
    def step_cost(self, model: StepCostModel) -> None:
        self._rounds.step_cost = model

    @property
    def encoder_cost(self) -> EncoderCosts:
        return self._rounds.encoder_cost

    @encoder_cost.setter
    def encoder_cost(self, costs: EncoderCosts) -> None:
        self._rounds.encoder_cost = costs

    @property
    def observer(self) -> SchedulerObserver | None:
        return self._rounds.observer

    @observer.setter
    def observer(self, observer: SchedulerObserver | None) -> None:
        self._rounds.observer = observer

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
        return self._thread.is_alive() and not self._rounds.stopping

    @property
    def backlog(self) -> int:
        """Requests queued or being decoded."""
        return self._in_flight

    @property
    def live_finals_cost_s(self) -> float:
        """Worker seconds every live final has cost so far (admission measures by it)."""
        return self._rounds.ledger.finals_cost_total

    def busy_fraction(self) -> float:
        """Fraction of the last seconds (about ``core.load.LOAD_WINDOW_S``) the thread
        worked."""
        return self._rounds.ledger.load.busy.rate(self._clock())

    async def submit_final(
        self, request: AsrRequest, realtime: bool = False
    ) -> concurrent.futures.Future:
        """Queue a final (over a short window when ``short_finals``, or when a client
        waits on it in ``realtime`` and finals keep the thread ``short_finals_busy``);
        waits while ``capacity`` requests are in flight."""
        assert self._slots is not None, "start() the scheduler first"
        await self._slots.acquire()
        self._finals_submitted += 1
        windowed, alone = self._final_windowed(request, realtime)
        return self._enqueue(windowed, final=True, whole_alone=alone)

    async def try_submit_partial(self, request: AsrRequest) -> concurrent.futures.Future | None:
        """Queue a partial if it cannot delay a final: none waits, and half the room is
        kept for finals. Returns None (never waits) otherwise."""
        assert self._slots is not None, "start() the scheduler first"
        if self._finals_waiting > 0 or self._in_flight >= self.capacity // 2:
            self.stats.partials_refused += 1
            return None
        await self._slots.acquire()  # cannot wait: fewer than capacity are in flight
        return self._enqueue(request, final=False)

    @property
    def _finals_waiting(self) -> int:
        """Finals submitted and not yet taken off the line (started, failed or cancelled);
        the rounds' count is read from the event loop, a plain int."""
        return self._finals_submitted - self._rounds.finals_taken

    def want_partials(self, change: int) -> None:
        """A stream opened (+1) or closed (-1) a segment that wants partials."""
        self._partial_streams = max(0, self._partial_streams + change)

    def partial_interval(self, base_s: float) -> float:
        """Seconds a stream should leave between its partials now (at least ``base_s``)."""
        load = self._rounds.ledger.load
        return self.pacing.interval(
            base_s, self._partial_streams, load.partial_cost_s, load.finals.rate(self._clock())
        )

    def _enqueue(
        self, request: AsrRequest, final: bool, whole_alone: bool = False
    ) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._in_flight += 1
        future.add_done_callback(self._release_from_any_thread)
        self._inbox.put(Job(request, future, final, self._clock(), whole_alone=whole_alone))
        return future

    def submit_background(self, request: AsrRequest, owner: object) -> concurrent.futures.Future:
        """Queue a recording's window behind every live request (``owner``: its file, so
        that files take turns). Never waits: the caller bounds what it has in flight."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._inbox.put(Job(self._windowed(request), future, False, self._clock(), owner=owner))
        return future

    def _final_windowed(self, request: AsrRequest, realtime: bool) -> tuple[AsrRequest, bool]:
        """A live final's request: a real-time client's over a short window once finals
        keep the thread ``short_finals_busy``, or while another final already waits for
        its encoder pass (a burst the load window has not seen yet: ten streams' first
        finals), else as ``_windowed`` says; and whether it is whole only for want of
        company (short after all if others wait with it when its pass begins:
        ``Job.among``)."""
        windowed = self._windowed(request)
        if not realtime or self.short_finals_busy >= 1.0:
            return windowed, False
        behind = self._finals_waiting > 1  # this one counted
        if behind or self._rounds.ledger.load.finals.rate(self._clock()) >= self.short_finals_busy:
            return request, False
        return windowed, windowed.whole_window and not request.whole_window

    def _windowed(self, request: AsrRequest) -> AsrRequest:
        """A final's or recording's request: over a whole window unless ``short_finals``."""
        return request if self.short_finals else replace(request, whole_window=True)

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
            self._inbox.put(STOP)
            await asyncio.to_thread(self._thread.join)

    # ================================================================ the ASR thread

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
        self._rounds.run()
