"""A recording's packed windows through the step scheduler, as background work.

At most ``windows_in_flight`` decodes wait at once, so a long recording never floods
the scheduler's queue, and live streams' rows go first. Whisper sometimes skips part
of a dense packed window (it ends early, or jumps from its first words to its last
sentence): the pieces it barely reached (``Window.unheard``) are decoded again, each
alone, and their words come from those decodes only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from parley.core.asr import Transcription
from parley.core.packing import Window
from parley.recordings.progress import Progress
from parley.workers.decoding import StreamDecoding
from parley.workers.scheduler import AsrScheduler


def _first_word_start(part: tuple[Window, Transcription]) -> float:
    """Where a decode's first word is in the recording (its window's start if none)."""
    window, result = part
    placed = [words for words in window.place(result.words) if words]
    return placed[0][0].start if placed else window.pieces[0].start


async def decode_windows(
    worker: AsrScheduler,
    windows_in_flight: int,
    audio: np.ndarray,
    windows: list[Window],
    decoding: StreamDecoding,
    progress: Progress,
    on_text: Callable[[str], None] | None,
) -> tuple[list[tuple[Window, Transcription]], float]:
    """Every window decoded, and once more each piece of a window the decoder skipped;
    the (window, result) pairs, and the seconds until the first result came.
    ``on_text`` is told each window's text, in recording order, as soon as it and all
    before it are done."""
    owner = object()  # this job, for the scheduler's turn-taking between files
    parts: list[list[tuple[Window, Transcription]]] = [[] for _ in windows]
    waiting = [1] * len(windows)  # decodes still due for each window (a retry adds one)
    pending: dict[concurrent.futures.Future, tuple[int, Window, bool]] = {}
    queued = [(index, window, False) for index, window in reversed(list(enumerate(windows)))]
    began, waited, told = time.perf_counter(), 0.0, 0
    try:
        while True:
            while len(pending) < windows_in_flight and queued:
                index, window, retry = queued.pop()
                request = decoding.request(
                    window.audio(audio), with_words=True, draft=None, context=()
                )
                pending[worker.submit_background(request, owner)] = (index, window, retry)
            if not pending:
                break
            await asyncio.wait(
                [asyncio.wrap_future(f) for f in pending], return_when=asyncio.FIRST_COMPLETED
            )
            for future in [f for f in pending if f.done()]:
                if future.cancelled():  # the scheduler stopped
                    raise RuntimeError("the ASR worker stopped before the recording was done")
                index, window, retry = pending.pop(future)
                result = future.result()  # raises its failure
                waited = waited or time.perf_counter() - began
                again = () if retry or result.rejected else window.unheard(result.words)
                if again:  # their words come from their own decodes, next
                    kept = window.words_outside(result.words, again)
                    result = replace(result, words=kept, text=" ".join(w.word for w in kept))
                    waiting[index] += len(again)
                    queued += [(index, Window((piece,), (0.0,)), True) for piece in again]
                parts[index].append((window, result))
                waiting[index] -= 1
                if not waiting[index]:
                    progress.advance()
            while told < len(windows) and not waiting[told]:
                for _, result in sorted(parts[told], key=_first_word_start):
                    if on_text is not None and result.text and not result.rejected:
                        on_text(decoding.partial_text(result.text))
                told += 1
    finally:
        for future in pending:
            future.cancel()
    return [pair for window_parts in parts for pair in window_parts], waited
