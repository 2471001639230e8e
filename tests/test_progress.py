"""A recording job's progress (recordings/progress.py): its parts, told as one fraction."""

from __future__ import annotations

import asyncio

from parley.recordings.progress import JobProgress


async def test_a_jobs_progress_reaches_one_only_once_every_part_has():
    """Every window decoded and half the recording's speakers heard (told from another
    thread, as the speakers' thread tells it) is 0.75, never 1; 1 once the speakers are
    done too; the fraction never goes back; nobody listening, no setter."""
    told: list[float] = []
    job = JobProgress(told.append, 2)
    windows, speakers = job.part(0), job.part(1)
    assert windows is not None and speakers is not None
    for done in range(1, 5):
        windows(done / 4)
    await asyncio.to_thread(speakers, 0.5)
    await asyncio.sleep(0)  # a report from another thread runs on the loop
    assert told[-1] == 0.75
    await asyncio.to_thread(speakers, 1.0)
    await asyncio.sleep(0)
    assert told[-1] == 1.0 and told.count(1.0) == 1
    assert told == sorted(told)
    assert JobProgress(None, 2).part(0) is None
