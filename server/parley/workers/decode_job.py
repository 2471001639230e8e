"""A request on the ASR thread, from the scheduler's inbox to its result: what it asks,
the decode running it, and what it has cost so far (decode_rounds.py moves it along)."""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field

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

    @property
    def running(self) -> Decode:
        """The decode of an active job (every active job has started one)."""
        assert self.decode is not None
        return self.decode
