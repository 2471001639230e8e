"""The step-level scheduler: lossless on real weights, and its rules on the fake engine."""

import asyncio
import contextlib
import threading
from dataclasses import replace

import numpy as np
import pytest

from audio_fixtures import SAMPLE_WAV, read_wav
from fake_engine import FakeEngine
from parley.core.asr import AsrRequest, Transcription
from parley.core.attempts import NO_REPEAT_TOKENS, transcribe
from parley.core.costs import EncoderCosts, StepCostModel
from parley.core.keyterms import KeytermBias
from parley.core.policy import AsrThreads
from parley.workers.calibration import calibrate
from parley.workers.scheduler import STEP_COST_PRIOR, AsrScheduler
from parley.workers.threads import ThreadSwitch


@pytest.fixture(scope="module")
def clips():
    audio = read_wav(SAMPLE_WAV)
    return [audio[int(s * 16000) : int(s * 16000) + 4 * 16000] for s in (7, 11, 15, 19, 23)]


@pytest.fixture(scope="module")
def plain(tiny_engine, clips):
    """Plain greedy decoding of each clip alone: the reference every path must equal."""
    return [tiny_engine.transcribe(c, budget=0) for c in clips]


def draft_of(engine, clip, share: float) -> tuple[int, ...]:
    """A draft as a partial would leave it: the tokens of the clip's first ``share``."""
    return engine.transcribe(clip[: int(len(clip) * share)]).tokens


async def results_of(futures):
    return [await asyncio.wrap_future(f) for f in futures]


async def until(condition, timeout_s: float = 10.0) -> None:
    """Wait for the scheduler's thread to reach a state (fails after ``timeout_s``): the
    verdict depends on the state, not on how fast this machine reaches it."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "the state was never reached"
        await asyncio.sleep(0.001)


async def decoding(engine: FakeEngine, rows: int = 1) -> None:
    """Until ``rows`` decodes hold rows and a step has run."""
    await asyncio.to_thread(engine.stepped.wait, 10.0)
    await until(lambda: len(engine.in_flight) >= rows and engine.stepped.is_set())


@contextlib.asynccontextmanager
async def running(engine, capacity: int, **options):
    """A started scheduler over ``engine``, stopped afterwards."""
    scheduler = AsrScheduler(engine, capacity=capacity, **options)
    await scheduler.start()
    try:
        yield scheduler
    finally:
        await scheduler.stop()


# ------------------------------------------------------------------ real weights: lossless


def test_rows_joining_and_leaving_mid_decode_change_no_token(tiny_engine, clips, plain):
    """Decodes join a running batch, leave it, pause while others step, with and without
    drafts: every row still decodes exactly its plain greedy tokens."""
    engine = tiny_engine
    requests = [
        AsrRequest(c, draft=draft_of(engine, c, 2 / 3) if i % 2 else None, with_words=i == 0)
        for i, c in enumerate(clips)
    ]
    running = engine.start(requests[:2])
    results = {}

    def step(indices, budget=8):
        live = [i for i in indices if not running[i].finished]
        engine.step([running[i] for i in live], [budget] * len(live))
        for i in live:
            if running[i].finished:
                results[i] = engine.finish(running[i])

    step([0, 1])
    step([0, 1], budget=3)
    running += engine.start(requests[2:4])  # two join mid-decode
    step([0, 1, 2, 3])
    step([2, 3])  # 0 and 1 pause while 2 and 3 step
    running += engine.start(requests[4:])  # one more joins
    while len(results) < len(running):
        step(range(len(running)), budget=15)  # rows leave as they finish
    got = [results[i] for i in range(len(running))]
    assert [r.tokens for r in got] == [p.tokens for p in plain]
    assert sum(r.stats.accepted for r in got) > 0
    alone = tiny_engine.transcribe(clips[0], with_words=True, budget=0).words
    assert [(w.word, w.start, w.end) for w in got[0].words] == [
        (w.word, w.start, w.end) for w in alone
    ]
    assert [w.probability for w in got[0].words] == pytest.approx(
        [w.probability for w in alone], abs=1e-4
    )  # float sums in other orders
    assert engine.decoder.in_flight == 0


async def test_scheduled_finals_and_partials_are_plain_greedy(tiny_engine, clips, plain):
    """Through the scheduler: finals with and without drafts batched together, partials
    paused and resumed around them: every result equals plain greedy decoding."""
    drafts = {i: draft_of(tiny_engine, c, 3 / 4) for i, c in enumerate(clips) if i % 2}
    async with running(tiny_engine, 16) as scheduler:
        # Whether a draft token pays is learnt from step timings, which on a busy machine
        # can say it never does; pinned to the prior (a token costs a twentieth of a
        # step), drafts are offered whatever the timings: this test is about
        # losslessness, not the policy.
        scheduler.step_cost = StepCostModel(prior=STEP_COST_PRIOR, prior_weight=1e9)
        partials = [await scheduler.try_submit_partial(AsrRequest(c)) for c in clips[:2]]
        finals = [
            await scheduler.submit_final(AsrRequest(c, draft=drafts.get(i)))
            for i, c in enumerate(clips)
        ]
        got = await results_of(finals)
        partial_results = await results_of(partials)
    assert [r.tokens for r in got] == [p.tokens for p in plain]
    assert [r.tokens for r in partial_results] == [p.tokens for p in plain[:2]]
    stats = scheduler.stats
    assert stats.rows_stepped > stats.steps  # rows shared steps
    assert stats.accepted > 0 and stats.jobs_done == 7


# ------------------------------------------------------------------ fake engine: the rules


@pytest.fixture(scope="module")
def speech():
    """Loud noise: the fake engine hears one word per 0.2 s of it."""
    rng = np.random.default_rng(1)
    return [
        (0.3 * rng.standard_normal(int(s * 16000))).astype(np.float32) for s in (3.0, 2.0, 1.0, 4.0)
    ]


async def test_a_final_pauses_running_partials_and_overtakes_queued_ones(speech):
    """While a final decodes, only final rows step; queued partials wait for it."""
    engine = FakeEngine(step_s=0.002)
    async with running(engine, 16) as scheduler:
        first = await scheduler.try_submit_partial(AsrRequest(speech[3]))
        await decoding(engine)
        final = await scheduler.submit_final(AsrRequest(speech[0]))
        done_order = []
        for name, future in (("partial", first), ("final", final)):
            future.add_done_callback(lambda _f, n=name: done_order.append(n))
        await results_of([first, final])
    assert done_order == ["final", "partial"]
    # once the final joined, steps carried one row (the final) until it left
    assert 1 in engine.step_sizes and max(engine.step_sizes) == 1


async def test_a_final_held_back_for_a_decode_that_runs_on_joins_after_one_pass(speech):
    """A waiting final is held back while the finals decoding are reckoned within one
    encoder pass of done. A decode past the length it was expected to reach (3 tokens an
    audio second, the prior; the fake engine says 5) is reckoned one step from done
    however long it runs on: held back one pass, the newcomer joins it all the same."""
    engine = FakeEngine(encode_s=0.05, step_s=0.01)
    long = np.concatenate([speech[3], speech[3]])  # 8 s: 40 tokens, 24 expected
    async with running(engine, 16) as scheduler:
        before = len(engine.step_sizes)
        first = await scheduler.submit_final(AsrRequest(long))
        await until(lambda: len(engine.step_sizes) - before >= 26)  # past its expected length
        second = await scheduler.submit_final(AsrRequest(speech[2]))
        await results_of([first, second])
    together = engine.step_sizes[before:]
    assert 2 in together  # the second decoded beside the first, not after it


class ToldSwitch(ThreadSwitch):
    """A thread switch that records what it is told, and the threads it sets where."""

    def __init__(self, burst_finals: int = 4):
        super().__init__(AsrThreads(base=1, burst=2, burst_finals=burst_finals), self._set)
        self.told: list[int] = []
        self.set_to: list[tuple[int, str]] = []

    def _set(self, threads: int) -> None:
        self.set_to.append((threads, threading.current_thread().name))

    def __call__(self, finals: int) -> None:
        self.told.append(finals)
        super().__call__(finals)


async def test_the_thread_switch_is_told_the_finals_in_hand_and_sets_threads_on_change(speech):
    """Each round the ASR thread tells the switch how many finals decode or wait; the
    switch sets that thread's torch threads only when its choice changes: every core
    for a burst of four finals, back to its own once they are done; none while held
    (finals wait for speaker steps, whose threads need the cores)."""
    engine = FakeEngine(encode_s=0.02, step_s=0.005)
    switch, held = ToldSwitch(), ToldSwitch()
    held.held = lambda: True
    for threads in (switch, held):
        async with running(engine, 16, threads=threads) as scheduler:
            burst = [await scheduler.submit_final(AsrRequest(speech[i % 4])) for i in range(5)]
            await results_of(burst)
            await results_of([await scheduler.submit_final(AsrRequest(speech[0]))])
        assert max(threads.told) >= 4 and threads.told[-1] <= 1
    assert switch.set_to == [(2, "parley-asr"), (1, "parley-asr")]
    assert held.set_to == []


async def test_cancelled_partials_leave_at_the_next_step(speech):
    """A partial cancelled mid-decode (its final was asked for) stops taking steps."""
    engine = FakeEngine(step_s=0.005)
    async with running(engine, 16) as scheduler:
        partial = await scheduler.try_submit_partial(AsrRequest(speech[3]))
        await decoding(engine)
        assert partial.cancel()  # running, but not finished: it can still be cancelled
        final = await scheduler.submit_final(AsrRequest(speech[2]))
        await asyncio.wrap_future(final)
    assert scheduler.stats.partials_cancelled == 1 and engine.in_flight == []
    assert sum(engine.step_sizes) < 20 + 5  # the 4 s partial's 20 steps were not all taken


async def test_a_final_takes_a_partials_row_when_none_is_free(speech):
    engine = FakeEngine(max_rows=2, step_s=0.005)
    async with running(engine, 16) as scheduler:
        partials = [await scheduler.try_submit_partial(AsrRequest(s)) for s in speech[:2]]
        await decoding(engine, rows=2)
        final = await scheduler.submit_final(AsrRequest(speech[2]))
        result = await asyncio.wrap_future(final)
        await asyncio.gather(*(asyncio.wrap_future(p) for p in partials), return_exceptions=True)
    assert result.text and scheduler.stats.partials_evicted == 1
    assert sum(p.cancelled() for p in partials) == 1


async def test_partials_are_not_taken_while_a_final_waits_or_the_queue_is_half_full(speech):
    engine = FakeEngine(encode_s=0.05)
    async with running(engine, 4) as scheduler:
        finals = [await scheduler.submit_final(AsrRequest(s)) for s in speech[:2]]
        assert await scheduler.try_submit_partial(AsrRequest(speech[2])) is None
        await results_of(finals)
        await until(lambda: scheduler.backlog == 0)  # the loop has released their room
        assert await scheduler.try_submit_partial(AsrRequest(speech[2])) is not None


async def test_finals_wait_for_room_when_the_queue_is_full(speech):
    """Back-pressure: the third final of a two-slot queue waits until one is done."""
    async with running(FakeEngine(encode_s=0.05), 2) as scheduler:
        finals = [await scheduler.submit_final(AsrRequest(s)) for s in speech[:2]]
        third = asyncio.create_task(scheduler.submit_final(AsrRequest(speech[2])))
        await asyncio.sleep(0.02)  # room to be let through wrongly: it must not be
        assert not third.done()
        finals.append(await third)
        assert all(r.text for r in await results_of(finals))


async def test_a_failing_request_fails_alone(speech):
    """The engine refuses one request of a batch: that future gets the error, others results."""
    engine = FakeEngine(fail=lambda request: len(request.audio) == len(speech[1]))
    async with running(engine, 8) as scheduler:
        futures = [await scheduler.submit_final(AsrRequest(s)) for s in speech[:3]]
        outcomes = await asyncio.gather(
            *(asyncio.wrap_future(f) for f in futures), return_exceptions=True
        )
    assert isinstance(outcomes[1], RuntimeError)
    assert outcomes[0].text and outcomes[2].text and engine.in_flight == []


async def test_partial_interval_stretches_evenly_under_load(speech):
    """With finals keeping the worker busy, every stream's partial interval grows."""
    async with running(FakeEngine(encode_s=0.03, step_s=0.003), 16) as scheduler:
        idle = scheduler.partial_interval(1.0)
        scheduler.want_partials(+6)
        partial = await scheduler.try_submit_partial(AsrRequest(speech[0]))
        await asyncio.wrap_future(partial)
        for _ in range(5):
            await results_of([await scheduler.submit_final(AsrRequest(s)) for s in speech])
        loaded = scheduler.partial_interval(1.0)
    assert idle == 1.0 and loaded > 1.0
    assert scheduler.busy_fraction() > 0.3


async def test_a_final_cancelled_in_the_queue_does_not_block_partials(speech):
    """A client that leaves with its final still queued: partials are taken again after."""
    async with running(FakeEngine(encode_s=0.05), 8) as scheduler:
        first = await scheduler.submit_final(AsrRequest(speech[0]))
        queued = await scheduler.submit_final(AsrRequest(speech[1]))
        assert queued.cancel()  # the session was closed before its final started
        await asyncio.wrap_future(first)
        await until(lambda: scheduler.backlog == 0)  # the cancelled one's room too
        assert await scheduler.try_submit_partial(AsrRequest(speech[2])) is not None


async def test_an_engine_that_fails_its_warm_up_stops_the_start(speech):
    """A broken engine is an error at start-up, not a server whose requests never end."""
    scheduler = AsrScheduler(FakeEngine(fail=lambda request: True), capacity=8)
    with pytest.raises(RuntimeError, match="warm-up"):
        await scheduler.start(warm_up=True)


@pytest.mark.parametrize(
    "seconds, timed",
    [
        ({1: 0.577, 2: 1.045, 4: 1.914, 8: 3.979}, [1, 2, 4]),  # this 2-core CPU, measured
        ({1: 0.411, 2: 0.842}, [1, 2]),  # the same CPU on another run: two cost two
        ({n: 0.010 + 0.001 * n for n in (1, 2, 4, 8, 16)}, [1, 2, 4, 8, 16]),  # a GPU
    ],
)
def test_the_warm_up_times_batch_sizes_the_policy_could_choose(seconds, timed):
    """Encoder batches double while the newest is what the scheduler would choose with
    every row waiting: a CPU whose batch of four saves too little to be chosen is not
    timed at eight (two passes of 4 s each here), a GPU is timed up to its rows."""
    now = [0.0]
    engine = FakeEngine(max_rows=16)
    start = engine.start

    def timed_start(requests):
        now[0] += seconds[len(requests)]
        return start(requests)

    engine.start = timed_start  # type: ignore[method-assign]
    costs = EncoderCosts()
    calibrate(engine, StepCostModel(prior=STEP_COST_PRIOR), costs, lambda: now[0])
    assert sorted(costs.known) == timed


async def test_recordings_run_behind_finals_and_give_up_rows_to_them(speech):
    """Background windows (a file's) take every free row, pause while a final decodes, and
    hand a row to a final that finds none free; the evicted window starts again and
    still gives its whole result. Two files take turns."""
    engine = FakeEngine(max_rows=2, step_s=0.003)
    async with running(engine, 16) as scheduler:
        first, second = object(), object()
        windows = [
            scheduler.submit_background(AsrRequest(speech[3]), first),
            scheduler.submit_background(AsrRequest(speech[3]), first),
            scheduler.submit_background(AsrRequest(speech[0]), second),
        ]
        await decoding(engine, rows=2)  # both rows hold background windows now
        final = await scheduler.submit_final(AsrRequest(speech[2]))
        order = []
        for name, future in (("final", final), *(("window", w) for w in windows)):
            future.add_done_callback(lambda _f, n=name: order.append(n))
        results = await results_of([final, *windows])
    assert order[0] == "final" and scheduler.stats.background_evicted == 1
    assert [len(r.tokens) for r in results[1:]] == [20, 20, 15]  # nothing lost to eviction
    assert scheduler.backlog == 0  # background work never took a live request's room


class LoopingWhenBiased(FakeEngine):
    """A fake whose keyterm-biased decodes loop: dropped as a repetition, text and all."""

    def finish(self, decode) -> Transcription:
        result = super().finish(decode)
        if decode.request.bias is None:
            return result
        return replace(result, text="", words=(), rejected="repetition")


async def test_a_biased_decode_that_loops_is_decoded_again_without_the_bias(speech):
    """Keyterms never cost a final (or a recording's window): the same audio is decoded
    again, unbiased, and the line's count stays right (a partial is let in after)."""
    engine = LoopingWhenBiased()
    bias = KeytermBias(((7, 8),))
    async with running(engine, 4) as scheduler:
        final = await scheduler.submit_final(AsrRequest(speech[0], with_words=True, bias=bias))
        window = scheduler.submit_background(AsrRequest(speech[1], bias=bias), owner="file")
        result, from_file = await results_of([final, window])
        await until(lambda: scheduler.backlog == 0)
        assert await scheduler.try_submit_partial(AsrRequest(speech[2])) is not None
    plain = FakeEngine().transcribe(speech[0], with_words=True)
    assert (result.text, result.words, result.rejected) == (plain.text, plain.words, None)
    assert from_file.text == FakeEngine().transcribe(speech[1]).text
    assert scheduler.stats.second_attempts == 2 and engine.in_flight == []


class LoopingUnlessForbidden(FakeEngine):
    """A fake whose decodes loop (dropped as a repetition) unless told not to repeat
    themselves."""

    def finish(self, decode) -> Transcription:
        result = super().finish(decode)
        if decode.request.no_repeat:
            return result
        return replace(result, text="", words=(), rejected="repetition")


async def test_a_decode_that_loops_is_decoded_again_with_its_loop_forbidden(speech):
    """A final (biased: tried unbiased first, which loops too) and a recording's window
    come out as their decodes with no run of NO_REPEAT_TOKENS written twice, not empty;
    a partial, a preview, gets one look."""
    engine = LoopingUnlessForbidden()
    bias = KeytermBias(((7, 8),))
    async with running(engine, 4) as scheduler:
        final = await scheduler.submit_final(AsrRequest(speech[0], with_words=True, bias=bias))
        window = scheduler.submit_background(AsrRequest(speech[1]), owner="file")
        result, from_file = await results_of([final, window])
        await until(lambda: scheduler.backlog == 0)
        partial = await scheduler.try_submit_partial(AsrRequest(speech[2]))
        (preview,) = await results_of([partial])
    unlooped = {"with_words": True, "no_repeat": NO_REPEAT_TOKENS}
    expected = transcribe(FakeEngine(), AsrRequest(speech[0], **unlooped))
    assert result.text and (result.text, result.words) == (expected.text, expected.words)
    assert result.rejected is None and from_file.rejected is None
    assert from_file.text == transcribe(FakeEngine(), AsrRequest(speech[1], **unlooped)).text
    assert preview.rejected == "repetition" and preview.text == ""
    assert scheduler.stats.second_attempts == 3 and engine.in_flight == []


class RunsOnOverShortWindows(FakeEngine):
    """A fake whose decodes over a short window run on past their audio (and read less
    likely than what the same decode over the whole window gives)."""

    def finish(self, decode) -> Transcription:
        result = super().finish(decode)
        if decode.request.whole_window:
            return result
        return replace(result, text="", words=(), window_too_short=True, avg_logprob=-0.1)


@pytest.mark.parametrize("short_finals", [False, True])
async def test_a_decode_that_ran_on_over_a_short_window_is_decoded_over_the_whole(
    speech, short_finals
):
    """A partial (and, with ``short_finals``, a final and a recording's window) that ran on
    over a short window, and again over the wider one, comes out as the whole window's
    decode, however likely the ones that ran on read; without ``short_finals`` finals
    and windows ask for whole ones."""
    engine = RunsOnOverShortWindows()
    async with running(engine, 4, short_finals=short_finals) as scheduler:
        final = await scheduler.submit_final(AsrRequest(speech[0], with_words=True))
        window = scheduler.submit_background(AsrRequest(speech[1]), owner="file")
        result, from_file = await results_of([final, window])
        await until(lambda: scheduler.backlog == 0)
        partial = await scheduler.try_submit_partial(AsrRequest(speech[2]))
        (preview,) = await results_of([partial])
    plain = FakeEngine()
    whole = plain.transcribe(speech[0], with_words=True)
    assert (result.text, result.words) == (whole.text, whole.words)
    assert from_file.text == plain.transcribe(speech[1]).text
    assert preview.text == plain.transcribe(speech[2]).text and preview.text
    assert not (result.window_too_short or from_file.window_too_short or preview.window_too_short)
    # each that ran on: over the wider window, then over the whole one
    assert scheduler.stats.second_attempts == (6 if short_finals else 2)
    assert engine.in_flight == []


class UnsureOfItsLanguage(FakeEngine):
    """A multilingual fake that detects English at 0.4 with German the runner-up, and
    whose German decode of the same audio is the likelier."""

    multilingual = True
    languages = frozenset({"en", "de"})

    def check_decoding(self, decoding) -> None:
        pass

    def finish(self, decode) -> Transcription:
        result = super().finish(decode)
        if decode.request.language is None:
            return replace(
                result,
                language="en",
                language_probability=0.4,
                runner_up=("de", 0.35),
                avg_logprob=-1.0,
            )
        return replace(result, language=decode.request.language, avg_logprob=-0.5)


async def test_a_final_of_uncertain_language_is_decoded_in_the_runner_up_too(speech):
    """The final keeps the likelier of its two decodes, with the probability detection
    gave its language; a partial (a preview) gets one look only."""
    engine = UnsureOfItsLanguage()
    async with running(engine, 4) as scheduler:
        final = await scheduler.submit_final(AsrRequest(speech[0]))
        (result,) = await results_of([final])
        partial = await scheduler.try_submit_partial(AsrRequest(speech[1]))
        (preview,) = await results_of([partial])
        await until(lambda: scheduler.backlog == 0)
    assert (result.language, result.language_probability, result.text) == (
        "de",
        0.35,
        FakeEngine().transcribe(speech[0]).text,
    )
    assert preview.language == "en" and scheduler.stats.second_attempts == 1


@pytest.mark.parametrize(
    "busy, realtime, expected",
    [(1.0, True, [True, True]), (0.01, True, [True, False]), (0.01, False, [True, True])],
)
async def test_finals_take_short_windows_once_finals_keep_the_thread_busy(
    speech, busy, realtime, expected
):
    """A real-time client's final asks for a whole window while finals have kept the
    thread less busy than ``short_finals_busy``; once a 0.2 s final has kept it busier,
    the next asks for a short one. A faster client's finals keep whole windows."""
    engine = FakeEngine(encode_s=0.2)
    async with running(engine, 4, short_finals_busy=busy) as scheduler:
        for clip in speech[:2]:
            await results_of([await scheduler.submit_final(AsrRequest(clip), realtime)])
    assert engine.whole_windows[-2:] == expected


class HeldInItsFirstPass(FakeEngine):
    """A fake whose first encoder pass waits until the test lets it go."""

    def __init__(self):
        super().__init__()
        self.encoding = threading.Event()
        self.release = threading.Event()

    def start(self, requests):
        if not self.encoding.is_set():
            self.encoding.set()
            self.release.wait(10.0)
        return super().start(requests)


async def test_a_final_that_waits_behind_another_takes_a_short_window_at_once(speech):
    """Ten streams' first finals come before the load window has seen any work: a
    real-time client's final submitted while another final still waits for its encoder
    pass asks for a short window; the first, and a faster client's, whole ones."""
    engine = HeldInItsFirstPass()
    async with running(engine, 4) as scheduler:
        first = await scheduler.submit_final(AsrRequest(speech[0]), True)
        await asyncio.to_thread(engine.encoding.wait, 10.0)
        behind = await scheduler.submit_final(AsrRequest(speech[1]), True)
        faster = await scheduler.submit_final(AsrRequest(speech[2]), False)
        engine.release.set()
        await results_of([first, behind, faster])
    assert engine.whole_windows == [True, False, True]


async def test_a_final_submitted_alone_is_short_if_others_wait_with_it_when_it_starts(speech):
    """Ten segments ending together are queued a few milliseconds apart: the first,
    submitted while no other final waited, asked for a whole window, but the others
    waited with it by the time its encoder pass began (the thread was busy), so it is
    short like them. A faster client's final keeps its whole window."""
    engine = HeldInItsFirstPass()
    async with running(engine, 6) as scheduler:
        partial = await scheduler.try_submit_partial(AsrRequest(speech[0]))
        await asyncio.to_thread(engine.encoding.wait, 10.0)
        first = await scheduler.submit_final(AsrRequest(speech[1]), True)
        second = await scheduler.submit_final(AsrRequest(speech[2]), True)
        faster = await scheduler.submit_final(AsrRequest(speech[0]), False)
        engine.release.set()
        await results_of([first, second, faster])
        assert partial is not None
        partial.cancel()
    assert engine.whole_windows[:1] == [False]  # the partial's pass
    assert sorted(engine.whole_windows[1:]) == [False, False, True]


class HoldEndsInTheFirstPass(HeldInItsFirstPass):
    """A fake whose first encoder pass outlasts the speaker steps' hold (``hold`` is
    cleared in it) and waits until the test lets it go; notes each pass's threads."""

    def __init__(self, switch: ToldSwitch, hold: threading.Event):
        super().__init__()
        self.switch, self.hold = switch, hold
        self.threads_at_pass: list[int] = []

    def start(self, requests):
        self.threads_at_pass.append(self.switch.set_to[-1][0] if self.switch.set_to else 1)
        self.hold.clear()
        return super().start(requests)


async def test_a_burst_takes_every_core_at_its_next_encoder_pass_once_nothing_holds_it(speech):
    """Finals that came during an encoder pass are encoded in the same round, one pass
    after another; the switch is asked before each, so once the speaker steps that held
    the burst back are done, the next pass already computes on every core."""
    switch, hold = ToldSwitch(), threading.Event()
    hold.set()
    switch.held = hold.is_set
    engine = HoldEndsInTheFirstPass(switch, hold)
    async with running(engine, 16, threads=switch) as scheduler:
        burst = [await scheduler.submit_final(AsrRequest(speech[0]))]
        await asyncio.to_thread(engine.encoding.wait, 10.0)
        burst += [await scheduler.submit_final(AsrRequest(speech[i % 4])) for i in range(1, 5)]
        engine.release.set()
        await results_of(burst)
    assert engine.threads_at_pass[:2] == [1, 2]
