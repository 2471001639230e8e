"""The ASR worker: priorities, cancellation, and batching when decodes queue up."""

import asyncio

import pytest

from audio_fixtures import SAMPLE_WAV, read_wav
from parley.runtime.asr_worker import AsrJob, AsrWorker


@pytest.fixture(scope="module")
def clips():
    audio = read_wav(SAMPLE_WAV)
    return [audio[int(s * 16000):int(s * 16000) + 4 * 16000] for s in (7, 11, 15, 19, 23)]


async def run_jobs(worker: AsrWorker, clips, hold_first: bool = True):
    """Submit every clip as a final while the worker is busy, so they queue up."""
    worker.start()
    try:
        futures = [await worker.submit_final(AsrJob(c, None, with_words=True)) for c in clips]
        return [await asyncio.wrap_future(f) for f in futures]
    finally:
        await worker.stop()


async def test_queued_jobs_are_batched_with_the_same_results(tiny_engine, clips):
    """With a queue, the worker batches plainly; each job still gets its own exact result."""
    one_by_one = await run_jobs(AsrWorker(tiny_engine, capacity=16), clips)
    batching = AsrWorker(tiny_engine, capacity=16, batch_when_waiting=2, max_batch=8)
    batched = await run_jobs(batching, clips)
    assert batching.stats.batches >= 1 and batching.stats.batched_jobs >= 3
    assert [r.tokens for r in batched] == [r.tokens for r in one_by_one]
    assert [r.text for r in batched] == [r.text for r in one_by_one]
    for result in batched:
        assert result.words and all(w.start <= w.end for w in result.words)


async def test_drafted_jobs_stay_speculative_when_drafted_batching_is_off(tiny_engine, clips):
    """batch_drafted=False (the CPU default): draft-less jobs batch, drafted ones run alone
    with their drafts, and every result is still the plain greedy one."""
    drafts = [tiny_engine.transcribe(c[: len(c) * 3 // 4]).tokens for c in clips]
    jobs = [AsrJob(c, None, False, draft=drafts[i] if i % 2 else None)
            for i, c in enumerate(clips)]
    worker = AsrWorker(tiny_engine, capacity=16, batch_when_waiting=2, max_batch=8,
                       batch_drafted=False)
    worker.start()
    try:
        futures = [await worker.submit_final(job) for job in jobs]
        results = [await asyncio.wrap_future(f) for f in futures]
    finally:
        await worker.stop()
    plain = [tiny_engine.transcribe(c) for c in clips]
    assert [r.tokens for r in results] == [p.tokens for p in plain]
    assert worker.stats.batches >= 1 and worker.stats.batched_jobs <= 3  # the draft-less ones
    for i, result in enumerate(results):
        if i % 2:
            assert result.stats.verify_steps > 0 and result.stats.accepted > 0


async def test_finals_overtake_queued_partials_and_cancelled_partials_never_run(tiny_engine,
                                                                                 clips):
    """A final submitted after partials runs before them; a cancelled partial is skipped."""
    worker = AsrWorker(tiny_engine, capacity=16)
    worker.start()
    order = []
    try:
        blocker = await worker.submit_final(AsrJob(clips[0], None, False))
        partial_a = await worker.try_submit_partial(AsrJob(clips[1], None, False))
        partial_b = await worker.try_submit_partial(AsrJob(clips[2], None, False))
        final = await worker.submit_final(AsrJob(clips[3], None, False))
        assert partial_a is not None and partial_b is not None
        assert partial_b.cancel()
        for name, future in (("final", final), ("partial", partial_a), ("blocker", blocker)):
            future.add_done_callback(lambda _f, n=name: order.append(n))
        await asyncio.wrap_future(partial_a)
        await asyncio.wrap_future(final)
    finally:
        await worker.stop()
    assert order.index("final") < order.index("partial")
    assert worker.stats.partials_cancelled == 1 and worker.stats.jobs_done == 3


async def test_partials_give_way_when_the_worker_is_half_full(tiny_engine, clips):
    """Half the queue is kept for finals: past it, a partial is not taken."""
    worker = AsrWorker(tiny_engine, capacity=4)
    worker.start()
    try:
        futures = [await worker.submit_final(AsrJob(c, None, False)) for c in clips[:2]]
        assert await worker.try_submit_partial(AsrJob(clips[2], None, False)) is None
        await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
        assert await worker.try_submit_partial(AsrJob(clips[2], None, False)) is not None
    finally:
        await worker.stop()
