"""The diarization threads on stand-in speaker models (no weights): due steps are
segmented together, several threads step sessions at once, the steps of a stream's
steady state are counted apart, and a recording's windows wait for the streams' steps,
at the speaker threads' priority."""

import asyncio
import os
import threading
import time

import numpy as np

from fake_engine import load_fake_asr
from parley.config import Settings
from parley.core.audio import SAMPLE_RATE
from parley.core.policy import IDLE
from parley.core.speaker_masks import FrameGrid
from parley.core.speaker_timeline import TimelineSnapshot
from parley.core.stream_diarizer import DiarizationConfig
from parley.core.whole_recording import observe_recording
from parley.recordings.files import FileRequest
from parley.service import file_jobs
from parley.workers.diarization import DiarizationWorker
from parley.workers.threads import lower_priority

GRID = FrameGrid(step=0.1, start=0.0)


class CountingModels:
    """One local speaker active throughout; records each segmentation pass's batch and
    the thread it ran on. Given ``pause``, a pass says it has begun (``entered``) and
    waits for it."""

    grid = GRID

    def __init__(self, pause: threading.Event | None = None):
        self.batches: list[int] = []
        self.threads: set[str] = set()
        self.callers: list[str] = []  # each pass's thread, in order
        self.entered = threading.Event()
        self._pause = pause

    def segment(self, windows):
        self.entered.set()
        if self._pause is not None:
            self._pause.wait(5)
        self.batches.append(len(windows))
        self.threads.add(threading.current_thread().name)
        self.callers.append(threading.current_thread().name)
        return [np.ones((int(len(w) / SAMPLE_RATE / GRID.step), 1)) for w in windows]

    def embed(self, window, masks):
        out = np.full((len(masks), 4), np.nan, dtype=np.float32)
        for i, mask in enumerate(masks):
            if mask.any():
                out[i] = [1.0, 0.0, 0.0, mask.sum() / SAMPLE_RATE]
        return out


async def _submit(worker, sessions: int, audio_s: float = 1.0):
    """One step of each of ``sessions`` new sessions, queued; their futures."""
    window = np.zeros(int(audio_s * SAMPLE_RATE), np.float32)
    return [await worker.submit(worker.new_stream(), window, 0.0, audio_s) for _ in range(sessions)]


async def _steps(worker, sessions: int):
    futures = await _submit(worker, sessions)
    return await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))


async def test_due_steps_of_several_sessions_are_segmented_in_one_pass():
    """Steps queued while the thread is busy are segmented together, up to max_batch."""
    release = threading.Event()
    models = CountingModels(release)
    worker = DiarizationWorker(models, DiarizationConfig(), max_batch=4)
    worker.start()
    first = await _submit(worker, 1)
    await asyncio.to_thread(models.entered.wait, 5)  # the thread waits inside the first
    rest = await _submit(worker, 6)  # queued meanwhile
    release.set()
    snapshots = await asyncio.gather(*(asyncio.wrap_future(f) for f in first + rest))
    await worker.stop()
    assert len(snapshots) == 7 and models.batches == [1, 4, 2]
    assert worker.stats.steps == 7 and worker.stats.failures == 0


async def test_a_step_a_final_waits_for_goes_before_the_routine_steps_queued():
    """An urgent step (a final's catch-up) queued behind routine ones runs first; the
    routine ones keep their order. Urgent steps are counted until run or cancelled."""
    release = threading.Event()
    models = CountingModels(release)
    worker = DiarizationWorker(models, DiarizationConfig(), max_batch=1)
    worker.start()
    window = np.zeros(SAMPLE_RATE, np.float32)
    done: list[str] = []

    async def step(name: str, urgent: bool = False):
        future = await worker.submit(worker.new_stream(), window, 0.0, 1.0, urgent=urgent)
        future.add_done_callback(lambda _: done.append(name))
        return future

    futures = [await step("running")]
    await asyncio.to_thread(models.entered.wait, 5)  # the thread waits inside the first
    futures += [await step("routine 1"), await step("routine 2"), await step("final's", True)]
    cancelled = await step("cancelled", True)
    assert worker.urgent_waiting == 2  # what the ASR thread leaves the cores for
    assert cancelled.cancel() and worker.urgent_waiting == 1
    release.set()
    await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
    await worker.stop()
    assert done == ["cancelled", "running", "final's", "routine 1", "routine 2"]
    assert worker.urgent_waiting == 0


async def test_several_threads_step_sessions_and_all_stop():
    """With threads=2 both threads take steps, and stop() ends both."""
    models = CountingModels()
    worker = DiarizationWorker(models, DiarizationConfig(), threads=2, max_batch=1)
    worker.start()
    assert worker.alive and worker.threads == 2
    for _ in range(20):
        await _steps(worker, 8)
    await worker.stop()
    assert not worker.alive and worker.stats.steps == 160
    assert models.threads == {"parley-diarization-0", "parley-diarization-1"}


async def test_a_step_at_a_checkpoint_brings_the_streams_relabel():
    """Once 30 s of windows are kept, the step that finds a checkpoint relabel due
    answers with the kept windows clustered at once; the steps between do not."""
    worker = DiarizationWorker(CountingModels(), DiarizationConfig(relabel_every_s=15.0))
    worker.start()
    diarizer = worker.new_stream()
    relabelled = []
    for step in range(1, 121):  # 60 s, a step every 0.5 s over the last 5 s at most
        now = step * 0.5
        heard = min(now, 5.0)
        window = np.zeros(int(heard * SAMPLE_RATE), np.float32)
        future = await worker.submit(diarizer, window, now - heard, now)
        snapshot = await asyncio.wrap_future(future)
        if snapshot.closing is not None:
            relabelled.append(now)
            assert snapshot.taken_over == {0: 0}  # one voice, kept by its live speaker
    await worker.stop()
    assert len(relabelled) == 2 and 30.0 <= relabelled[0] <= 36.0
    assert relabelled[1] - relabelled[0] == 15.0


async def test_a_short_streams_last_step_brings_its_live_timeline_to_relabel_from():
    """A stream too short to cluster still ends with a closing timeline: its live one as
    it stands, every label settled, so that the finals settled under a label merged away
    since are relabelled too; with closing_s 0 nothing is relabelled."""
    for closing_s, relabelled in ((7200.0, True), (0.0, False)):
        worker = DiarizationWorker(CountingModels(), DiarizationConfig(closing_s=closing_s))
        worker.start()
        diarizer = worker.new_stream()
        for step in range(1, 21):  # 10 s
            now = step * 0.5
            heard = min(now, 5.0)
            window = np.zeros(int(heard * SAMPLE_RATE), np.float32)
            snapshot = await asyncio.wrap_future(
                await worker.submit(diarizer, window, now - heard, now)
            )
            assert snapshot.closing is None
        last = await worker.submit(diarizer, np.zeros(0, np.float32), 10.0, 10.0, final=True)
        snapshot = await asyncio.wrap_future(last)
        await worker.stop()
        if not relabelled:
            assert snapshot.closing is None
            continue
        assert snapshot.closing is not None and snapshot.taken_over is None
        assert snapshot.closing.turns == diarizer.as_recording().turns
        assert snapshot.closing.speaker_count == 1 and snapshot.closing.turns[-1].end >= 9.5


async def test_only_whole_window_steps_with_every_speaker_embedded_count_as_steady():
    """A stream's first steps (a window still growing) and thinned steps are counted
    among all steps, not among the steady-state ones admission measures."""
    worker = DiarizationWorker(CountingModels(), DiarizationConfig())
    worker.start()
    diarizer = worker.new_stream()
    whole = DiarizationConfig().window_s
    for heard, thin in ((1.0, False), (whole, False), (whole, True), (whole, False)):
        window = np.zeros(int(heard * SAMPLE_RATE), np.float32)
        await asyncio.wrap_future(await worker.submit(diarizer, window, 0.0, heard, thin=thin))
    await worker.stop()
    stats = worker.stats
    assert (stats.steps, stats.full_steps) == (4, 2)
    assert 0.0 < stats.full_cost_seconds < stats.busy_seconds


class BusyOrWaitingModels(CountingModels):
    """Segmentation that either computes for ``seconds`` or waits as long (as a step
    kept off its core by another thread does)."""

    def __init__(self, seconds: float, busy: bool):
        super().__init__()
        self._seconds, self._busy = seconds, busy

    def segment(self, windows):
        if self._busy:  # so much CPU, however long the machine makes it take
            until = time.thread_time() + self._seconds
            while time.thread_time() < until:
                pass
        else:
            time.sleep(self._seconds)
        return super().segment(windows)


async def test_a_steps_cost_on_the_thread_clock_is_its_work_not_its_wait():
    """Admission reads steady-state steps on the thread's CPU clock where the models
    compute on the calling thread: time a step spends waiting is not work it did."""
    whole = DiarizationConfig().window_s
    window = np.zeros(int(whole * SAMPLE_RATE), np.float32)
    costs = {}
    for busy in (True, False):
        models = BusyOrWaitingModels(0.2, busy)
        worker = DiarizationWorker(models, DiarizationConfig(), cost_clock=time.thread_time)
        worker.start()
        step = await worker.submit(worker.new_stream(), window, 0.0, whole)
        await asyncio.wrap_future(step)
        await worker.stop()
        assert worker.stats.full_steps == 1 and worker.stats.busy_seconds >= 0.2
        costs[busy] = worker.stats.full_cost_seconds
    assert costs[True] >= 0.19 and costs[False] < 0.05


async def test_a_recordings_windows_wait_until_no_streams_step_is_due():
    """A recording's speaker work that puts the live streams first (``wait_quiet`` before
    each window) observes no window while a stream's step is queued or running, and goes
    on once the last is done; a step cancelled while queued is no longer waited for."""
    release = threading.Event()
    models = CountingModels(release)
    worker = DiarizationWorker(models, DiarizationConfig(), max_batch=1)
    worker.start()
    steps = await _submit(worker, 2)
    await asyncio.to_thread(models.entered.wait, 5)  # the first step runs, the second waits
    cancelled = await _submit(worker, 1)
    assert cancelled[0].cancel()
    audio = np.zeros(8 * SAMPLE_RATE, np.float32)

    def recording():
        thread = threading.current_thread()
        name, thread.name = thread.name, "recording"  # an executor's thread: given back
        live_first = lambda: worker.wait_quiet(30)  # noqa: E731
        try:
            return observe_recording(
                models, audio, DiarizationConfig(), 1.0, None, (0, 1), live_first
            )
        finally:
            thread.name = name

    observing = asyncio.create_task(asyncio.to_thread(recording))
    await asyncio.sleep(0.3)
    assert not observing.done() and models.callers == []
    release.set()
    windows = await asyncio.wait_for(observing, 10)  # not the 30 s a leaked count would take
    await asyncio.gather(*(asyncio.wrap_future(f) for f in steps))
    await worker.stop()
    assert len(windows) > 1
    assert models.callers == ["parley-diarization-0"] * 2 + ["recording"] * len(windows)


async def test_waiting_for_quiet_ends_at_its_timeout_while_a_step_runs():
    """With a stream's step still running, ``wait_quiet`` returns after its timeout."""
    release = threading.Event()
    models = CountingModels(release)
    worker = DiarizationWorker(models, DiarizationConfig())
    worker.start()
    steps = await _submit(worker, 1)
    await asyncio.to_thread(models.entered.wait, 5)
    began = time.perf_counter()
    await asyncio.to_thread(worker.wait_quiet, 0.2)
    waited = time.perf_counter() - began
    release.set()
    await asyncio.gather(*(asyncio.wrap_future(f) for f in steps))
    await worker.stop()
    assert 0.2 <= waited < 5


def test_a_thread_lowered_to_idle_runs_under_sched_idle_as_do_the_threads_it_starts():
    """``lower_priority(IDLE)`` puts the calling thread (not the process) under Linux's
    SCHED_IDLE, which threads it starts inherit; a nice value sets that thread's nice."""
    seen: dict[str, int] = {}

    def lowered(priority, name):
        lower_priority(priority)
        seen[name] = os.sched_getscheduler(0)
        seen[name + " nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        child = threading.Thread(
            target=lambda: seen.update({name + " child": os.sched_getscheduler(0)})
        )
        child.start()
        child.join()

    for priority, name in ((IDLE, "idle"), (7, "nice")):
        thread = threading.Thread(target=lowered, args=(priority, name))
        thread.start()
        thread.join()
    assert seen["idle"] == seen["idle child"] == os.SCHED_IDLE
    assert seen["nice"] == seen["nice child"] == os.SCHED_OTHER and seen["nice nice"] == 7
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # this thread is untouched


class PriorityOfRecordings:
    """Speaker models that diarize a recording into no turns, noting the CPU priority of
    the thread that asked: (scheduling policy, nice)."""

    grid = GRID

    def __init__(self):
        self.seen: list[tuple[int, int]] = []

    def diarize_recording(self, audio, config, clustering, count, step_s, heard, live_first):
        native = threading.get_native_id()
        self.seen.append((os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, native)))
        return TimelineSnapshot((), 0.0, 0)


async def test_a_recordings_speaker_work_runs_at_the_live_speaker_threads_priority():
    """``diarization.nice`` sets a recording's speaker work's priority as it sets the
    live speaker threads': under SCHED_IDLE by default, a nice value where set (there a
    host busy with other processes still gets it done: the test suite's three workers
    left a recording's speakers under SCHED_IDLE waiting minutes)."""
    seen = []
    for nice in (IDLE, 7):
        settings = Settings(diarization={"nice": nice})
        models = PriorityOfRecordings()
        scheduler, _ = load_fake_asr(settings)
        await scheduler.start(warm_up=False)
        try:
            jobs = file_jobs(settings, scheduler, DiarizationWorker(models, DiarizationConfig()))
            with jobs.slot():
                await jobs.transcribe(np.zeros(SAMPLE_RATE, np.float32), FileRequest(diarize=True))
        finally:
            await scheduler.stop()
        seen += models.seen
    assert seen == [(os.SCHED_IDLE, 0), (os.SCHED_OTHER, 7)]
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # this thread is untouched
