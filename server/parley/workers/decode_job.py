"""A request on the ASR thread, from the scheduler's inbox to its result: what it asks,
the decode running it, and what it has cost so far (decode_rounds.py moves it along)."""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field, replace

from parley.core.asr import AsrRequest, Decode, Transcription
from parley.core.costs import Acceptance


@dataclass(eq=False)
class Job:
    """One submitted request, from the inbox to its result."""

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
    first: Transcription | None = None  # the first attempt's result, when it has a second
    # A real-time final given a whole window only because no other final waited with it
    # when it was submitted (``AsrScheduler._final_windowed``): see ``among``.
    whole_alone: bool = False

    def among(self, finals: int) -> Job:
        """This job as its encoder pass begins with ``finals`` finals waiting, itself
        counted. In a burst a final submitted alone is short after all: the others came
        while it waited (ten segments ending together, queued a few ms apart), and a
        whole window would make it the slowest of them, its draft read over other audio."""
        if self.whole_alone and finals > 1:
            self.request, self.whole_alone = replace(self.request, whole_window=False), False
        return self

    @property
    def running(self) -> Decode:
        """The decode of an active job (every active job has started one)."""
        assert self.decode is not None
        return self.decode
