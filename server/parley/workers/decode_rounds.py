"""The ASR thread's side of the scheduler (scheduler.py): its waiting lines and the
batch in flight, advanced one round at a time. Only that thread touches any of it; the
event loop hands work over through the inbox and reads ``finals_taken`` and the ledger."""

from __future__ import annotations

import logging
import queue
from collections import deque
from collections.abc import Callable

from parley.core.asr import AsrRequest, Transcriber
from parley.core.attempts import better_attempt, second_attempt
from parley.core.costs import Acceptance, EncoderCosts, StepCostModel
from parley.core.load import LoadLedger
from parley.core.policy import (
    draft_budgets,
    encoder_batch_size,
    finish_decoding_first,
    remaining_steps,
)
from parley.workers.decode_job import Job
from parley.workers.scheduler_stats import SchedulerObserver, SchedulerStats

log = logging.getLogger(__name__)

STOP = object()  # put in the inbox: finish the finals, cancel the rest, end the rounds


class DecodeRounds:
    """The decodes of every session and recording: admitted, stepped together and
    finished, round by round, on the ASR thread."""

    def __init__(
        self,
        engine: Transcriber,
        inbox: queue.SimpleQueue,
        stats: SchedulerStats,
        ledger: LoadLedger,
        step_cost: StepCostModel,
        encoder_cost: EncoderCosts,
        clock: Callable[[], float],
    ):
        self.engine = engine
        self.stats = stats
        self.ledger = ledger
        self.step_cost = step_cost
        self.encoder_cost = encoder_cost
        self.observer: SchedulerObserver | None = None  # may be set at any time
        self.on_finals: Callable[[int], None] = lambda finals: None  # told the finals in hand
        self.finals_taken = 0  # finals taken off the line: started, failed or cancelled
        self.stopping = False
        self._inbox = inbox
        self._clock = clock
        self._finals: deque[Job] = deque()
        self._partials: deque[Job] = deque()
        self._background: dict[object, deque[Job]] = {}  # per file, taken in turn
        self._active: list[Job] = []
        # Since when the first waiting final has been held back for the finals decoding
        # to finish first (None: it is not); only steps run meanwhile.
        self._deferred_since: float | None = None

    def run(self) -> None:
        """Rounds until stopped and drained: take what was submitted, drop what was
        cancelled, admit, step."""
        while self._take(
            block=not (self._active or self._finals or self._partials or self._background)
        ):
            try:
                self._discard_cancelled()
                self._tell_finals()
                self._admit()
                if self._active:
                    self._step()
            except Exception as exc:  # a fault of ours: no request may wait forever on it
                log.exception("the ASR scheduler failed; its requests end with an error")
                self._fail_everything(exc)

    def _tell_finals(self) -> None:
        self.on_finals(len(self._finals) + sum(j.final for j in self._active))

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
                self.finals_taken += job.final
                self._fail(job, exc)

    def _take(self, block: bool) -> bool:
        """Move submitted jobs into the waiting lines; False once stopped and drained."""
        try:
            item = self._inbox.get(block=block and not self.stopping)
            while True:
                if item is STOP:
                    self.stopping = True
                elif item.owner is not None:
                    self._background.setdefault(item.owner, deque()).append(item)
                else:
                    (self._finals if item.final else self._partials).append(item)
                item = self._inbox.get_nowait()
        except queue.Empty:
            pass
        if self.stopping:
            for job in [*self._partials, *(j for line in self._background.values() for j in line)]:
                job.future.cancel()
            self._partials.clear()
            self._background.clear()
            for job in [j for j in self._active if not j.final]:
                self._leave(job)
                job.future.cancel()
        return not (self.stopping and not self._finals and not self._active)

    def _discard_cancelled(self) -> None:
        for line in (self._finals, self._partials, *self._background.values()):
            for job in [j for j in line if j.future.cancelled()]:
                line.remove(job)
                self.stats.partials_cancelled += not job.final
                self.finals_taken += job.final
        for job in [j for j in self._active if j.future.cancelled()]:
            self._leave(job)
            self.stats.partials_cancelled += not job.final

    def _admit(self) -> None:
        """Waiting finals join now (unless the finals decoding are about to be done);
        partials join only when no final waits or decodes."""
        if not self._finals:
            self._deferred_since = None  # the final held back was cancelled meanwhile
        while self._finals:
            now = self._clock()
            deferred = 0.0 if self._deferred_since is None else now - self._deferred_since
            if finish_decoding_first(self._remaining_seconds(), self.encoder_cost(1), deferred):
                if self._deferred_since is None:
                    self._deferred_since = now
                break
            self._deferred_since = None
            free = self.engine.max_rows - len(self._active)
            if free == 0 and not self._evict_partial():
                return  # every row decodes a final: the next one joins when one leaves
            free = self.engine.max_rows - len(self._active)
            count = encoder_batch_size(min(len(self._finals), free), self.encoder_cost.known)
            waiting = len(self._finals)
            self._tell_finals()  # a burst's passes take both cores once nothing holds them
            self._start([self._finals.popleft().among(waiting) for _ in range(count)])
            self.finals_taken += count
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

    def _next_background(self) -> Job:
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
        remaining, rate = [], self.ledger.tokens_per_second
        for job in finals:
            expected = max(len(job.request.draft or ()), rate * job.request.seconds)
            steps = remaining_steps(job.produced, job.steps, expected, job.running.drafting)
            remaining.append(steps * step + self.ledger.finish_seconds)
        return remaining

    def _start(self, jobs: list[Job]) -> None:
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
        kind = "finals" if jobs[0].final else "partials"
        log.debug("started %d %s in %.3f s", len(jobs), kind, spent)
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
                self.ledger.decoded(job.final, job.cost, self._clock())
            if job.final:
                self.ledger.final_done(job.request.seconds, len(result.tokens), finished_in)
            self.stats.jobs_done += 1
            log.debug(
                "%s of %.1f s: waited %.3f s, done after %.3f s, cost %.3f s, %d steps, "
                "a draft of %d tokens, %d of %d offered kept, %d in flight",
                "final" if job.final else "partial",
                job.request.seconds,
                job.admitted - job.submitted,
                self._clock() - job.submitted,
                job.cost,
                job.steps,
                len(job.request.draft or ()),
                result.stats.accepted,
                result.stats.drafted,
                len(self._active),
            )
            if job.first is not None:
                result = better_attempt(job.first, result)
            # A partial is a preview: one look, unless its short window ran on.
            preview = job.owner is None and not job.final
            if not preview or result.window_too_short:
                again = second_attempt(job.request, result)
                if again is not None:
                    job.first = result
                    self._again(job, again)
                    continue
            self.stats.audio_seconds += job.request.seconds
            if self.observer is not None and job.owner is None:
                self.observer.decoded(
                    job.final, job.admitted - job.submitted, self._clock() - job.admitted
                )
            if job.future.set_running_or_notify_cancel():
                job.future.set_result(result)
            else:
                self.stats.partials_cancelled += not job.final

    def _again(self, job: Job, request: AsrRequest) -> None:
        """Put ``job`` back at the front of its line, to be decoded as ``request``."""
        self.stats.second_attempts += 1
        job.request, job.decode, job.whole_alone = request, None, False  # its window as asked
        job.steps = job.produced = 0
        job.acceptance = Acceptance()
        if job.owner is not None:
            self._background.setdefault(job.owner, deque()).appendleft(job)
        else:
            self._finals.appendleft(job)
            self.finals_taken -= 1  # it waits on the line again

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

    def _leave(self, job: Job) -> None:
        """Take a decode out of the batch without a result."""
        self._active.remove(job)
        self.engine.drop(job.decode)
        if job.owner is None:
            self.ledger.decoded(job.final, job.cost, self._clock())

    def _fail(self, job: Job, exc: Exception) -> None:
        self.stats.jobs_failed += 1
        if job.future.set_running_or_notify_cancel():
            job.future.set_exception(exc)

    def _work(self, seconds: float) -> float:
        self.stats.busy_seconds += seconds
        self.ledger.worked(seconds, self._clock())
        return seconds
