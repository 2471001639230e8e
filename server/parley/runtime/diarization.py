"""Incremental diarization: per-session state, stepped by one thread that owns the models.

``StreamDiarizer`` holds one session's global speakers and timeline; only the
diarization thread touches it. Each step returns an immutable ``TimelineSnapshot``
that the session reads on the event loop, so no state is shared across threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from parley.core.audio import SAMPLE_RATE
from parley.core.speaker_timeline import SpeakerTimeline, TimelineSnapshot
from parley.core.speakers import ClusteringConfig, OnlineClustering

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DiarizationConfig:
    window_s: float = 5.0
    step_s: float = 0.5
    latency_s: float = 2.0  # how long a label may still change
    clustering: ClusteringConfig = ClusteringConfig()

    def __post_init__(self) -> None:
        if not 0 < self.step_s <= self.window_s:
            raise ValueError("the diarization step must be positive and at most the window")
        if self.latency_s < self.step_s:
            raise ValueError("the diarization latency must be at least one step")


class StreamDiarizer:
    def __init__(self, models, config: DiarizationConfig):
        self._models = models
        self.config = config
        self.clustering = OnlineClustering(config.clustering)
        self.timeline = SpeakerTimeline(models.frame_step, config.latency_s)

    def step(self, window: np.ndarray, window_start: float, now: float,
             final: bool = False) -> TimelineSnapshot:
        if len(window) >= SAMPLE_RATE // 2:
            self._add(window, window_start)
        self.timeline.advance(now, final=final)
        return self.timeline.snapshot()

    def replay(self, audio: np.ndarray) -> list[float]:
        """Step through a whole recording as the server does (the last ``window_s`` every
        ``step_s``), then settle every label; returns each step's duration in seconds."""
        step = int(self.config.step_s * SAMPLE_RATE)
        window = int(self.config.window_s * SAMPLE_RATE)
        times = []
        for end in range(step, len(audio) + 1, step):
            start = max(0, end - window)
            began = time.perf_counter()
            self.step(audio[start:end], start / SAMPLE_RATE, end / SAMPLE_RATE)
            times.append(time.perf_counter() - began)
        self.step(audio[:0], 0.0, len(audio) / SAMPLE_RATE, final=True)
        return times

    def _add(self, window: np.ndarray, window_start: float) -> None:
        import torch

        models = self._models
        activity = models.segment(window)
        frames, local = activity.shape
        active = activity > 0.5
        # Embed each speaker from the frames where only they speak, if there are enough.
        alone = active & (active.sum(axis=1, keepdims=True) == 1)
        per_sample = np.minimum(
            ((np.arange(len(window)) / SAMPLE_RATE - models.frame_start)
             // models.frame_step).astype(int), frames - 1).clip(0)
        masks = []
        for s in range(local):
            frame_mask = alone[:, s] if alone[:, s].sum() * models.frame_step >= 0.5 \
                else active[:, s]
            masks.append(frame_mask[per_sample])
        embeddings = models.embed(torch.from_numpy(window), torch.from_numpy(np.stack(masks)))
        mapping = self.clustering.assign(embeddings, activity.max(axis=0))
        speakers = self.clustering.speaker_count
        global_activity = np.zeros((frames, speakers))
        for s, g in enumerate(mapping):
            if g is not None:
                global_activity[:, g] = np.maximum(global_activity[:, g], activity[:, s])
        self.timeline.add_window(window_start + models.frame_start, global_activity)


@dataclass
class DiarizationStats:
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

    def __init__(self, models, config: DiarizationConfig, capacity: int = 64,
                 on_thread_start: Callable[[], None] | None = None):
        self.models = models
        self.config = config
        self.stats = DiarizationStats()
        self.on_step: Callable[[float], None] | None = None  # told each step's seconds
        self._on_thread_start = on_thread_start
        self._queue: queue.Queue = queue.Queue(capacity)
        self._thread = threading.Thread(target=self._run, name="parley-diarization",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def new_stream(self) -> StreamDiarizer:
        return StreamDiarizer(self.models, self.config)

    async def submit(self, diarizer: StreamDiarizer, window: np.ndarray, window_start: float,
                     now: float, final: bool = False) -> concurrent.futures.Future:
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
