"""A session's messages in stream order: one bounded outbox of messages, decodes not yet
done and diarization steps, read in turn. Decodes are shaped (redaction, numerals) on
the way out, where a final may wait for the next (``NumberHold``); finals then get their
speakers and are timed (the latency a client sees) as they go out; a stream with an
offset is told in its time."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from parley.protocol.messages import (
    Error,
    ErrorCode,
    Final,
    Partial,
    ServerMessage,
    SessionEnded,
    SpeakerNames,
)
from parley.protocol.recast import shifted, with_speaker
from parley.sessions.arrivals import Arrivals
from parley.sessions.marks import Mark
from parley.sessions.number_hold import NumberHold, Unshaped
from parley.sessions.speaker_track import SpeakerTrack
from parley.workers.decoding import StreamDecoding

OUTBOX_SIZE = 256


@dataclass
class _Decode:
    """An outbox entry whose message exists once the worker is done."""

    future: concurrent.futures.Future
    to_message: Callable[[Any], Final | Partial]  # the future's result → its message
    segment_id: int
    is_final: bool
    decoding: StreamDecoding  # shapes the message on its way out


@dataclass
class _DiarizationStep:
    """An outbox entry: a diarization step whose snapshot may revise earlier speakers."""

    future: concurrent.futures.Future


@dataclass(frozen=True)
class _Tick:
    """Audio reached ``stream_time`` while a final waits (``NumberHold.deadline``)."""

    stream_time: float


_END = object()


class SessionOutbox:
    """What one session has queued for its client, and the bookkeeping of finals due."""

    def __init__(
        self,
        speakers: SpeakerTrack | None,
        speaker: str | None,
        offset_s: float,
        final_latency: Callable[[float], None] | None,
        audio_settled: Callable[[float], None] | None,
    ):
        self._queue: asyncio.Queue = asyncio.Queue(OUTBOX_SIZE)
        self._speakers = speakers
        self._speaker = speaker
        self._offset_s = offset_s
        self._final_latency = final_latency
        self._audio_settled = audio_settled
        self._unsent_ends: deque[float] = deque()  # ends of closed segments whose final is due
        self._settled_to = 0.0  # stream time up to which finals have been sent
        self._diarization_failed = False
        self.arrivals = Arrivals()  # when the client's audio came: finals are timed by it
        self._hold = NumberHold()
        self._tick_queued = False
        self._names_told: dict[str, str] = {}  # the known speakers' labels, as last sent

    # ------------------------------------------------------------------ in

    def final_due(self, end: float) -> None:
        """A segment ending at ``end`` closed: its final (or its error) is to come."""
        self._unsent_ends.append(end)

    @property
    def oldest_unsent_end(self) -> float | None:
        """The end of the oldest closed segment whose final is not sent yet, or None."""
        return self._unsent_ends[0] if self._unsent_ends else None

    def arrived(self, stream_time: float) -> None:
        """Audio up to ``stream_time`` arrived now (finals are timed from it; a final
        waiting for the next may be due to leave)."""
        self.arrivals.note(stream_time)
        deadline = self._hold.deadline
        if deadline is not None and stream_time >= deadline and not self._tick_queued:
            try:
                self._queue.put_nowait(_Tick(stream_time))
                self._tick_queued = True
            except asyncio.QueueFull:
                pass  # the reader has plenty to do: told with the next audio

    async def put(self, message: ServerMessage | Mark) -> None:
        """A message, sent as it is (waits while the outbox is full)."""
        await self._queue.put(message)

    async def put_decode(
        self,
        future: concurrent.futures.Future,
        to_message: Callable[[Any], Final | Partial],
        segment_id: int,
        is_final: bool,
        decoding: StreamDecoding,
    ) -> None:
        """A decode's message, sent once its future is done (``to_message`` of its result,
        shaped by ``decoding``)."""
        await self._queue.put(_Decode(future, to_message, segment_id, is_final, decoding))

    async def put_speakers(self, step: concurrent.futures.Future) -> None:
        """A diarization step, whose snapshot may revise earlier speakers."""
        await self._queue.put(_DiarizationStep(step))

    async def end(self) -> None:
        """Nothing follows: ``messages()`` ends after what is queued."""
        await self._queue.put(_END)

    def cancel(self) -> None:
        """The client is gone: drop what is queued and cancel its unfinished work."""
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if isinstance(item, (_Decode, _DiarizationStep)):
                item.future.cancel()

    # ------------------------------------------------------------------ out

    async def messages(self) -> AsyncIterator[ServerMessage | Mark]:
        """Server messages (and marks) in stream order, until (and including)
        ``session_ended``."""
        async for item in self._in_stream_time():
            if isinstance(item, _Tick):
                self._tick_queued = False
                out = self._hold.tick(item.stream_time)
            else:
                out = self._hold.take(item)
            for message in out:
                if isinstance(message, (Final, Partial)):
                    message = self._with_speakers(message)
                    if isinstance(message, Final):
                        self._time_final(message)
                yield shifted(message, self._offset_s) if self._offset_s else message

    async def _in_stream_time(self) -> AsyncIterator[ServerMessage | Mark | Unshaped | _Tick]:
        while True:
            item = await self._queue.get()
            if item is _END:
                return
            if isinstance(item, _Tick):
                yield item
                continue
            if isinstance(item, _DiarizationStep):
                for update in await self._speaker_updates(item):
                    yield update
                if self._speakers is not None and self._speakers.names != self._names_told:
                    self._names_told = dict(self._speakers.names)  # after the updates' labels
                    yield SpeakerNames(self._names_told)
                continue
            if not isinstance(item, _Decode):
                if isinstance(item, SessionEnded):
                    self._settle(item.audio_duration)
                yield item
                continue
            try:
                result = await asyncio.wrap_future(item.future)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # our reader is being cancelled, not just this decode
                continue  # a partial overtaken by its final
            except Exception as exc:
                if item.is_final:
                    self._final_sent()
                    yield Error(
                        ErrorCode.TRANSCRIPTION_FAILED,
                        f"segment {item.segment_id} could not be transcribed: {exc}",
                        segment_id=item.segment_id,
                    )
                continue
            message = item.to_message(result)
            if isinstance(message, Final):
                self._final_sent()
            yield Unshaped(message, item.decoding)

    def _final_sent(self) -> None:
        if self._unsent_ends:
            self._settle(self._unsent_ends.popleft())

    def _settle(self, until: float) -> None:
        if self._audio_settled is not None and until > self._settled_to:
            self._audio_settled(until - self._settled_to)
        self._settled_to = max(self._settled_to, until)

    def _time_final(self, final: Final) -> None:
        if self._final_latency is None:
            return
        waited = self.arrivals.since(final.end)
        if waited is not None:
            self._final_latency(waited)

    def _with_speakers(self, message: Final | Partial) -> Final | Partial:
        if self._speaker is not None:
            return with_speaker(message, self._speaker)
        if self._speakers is None:
            return message
        if isinstance(message, Final):
            return self._speakers.label_final(message)
        if isinstance(message, Partial):
            return self._speakers.label_partial(message)
        return message

    async def _speaker_updates(self, step: _DiarizationStep) -> list[ServerMessage]:
        assert self._speakers is not None
        try:
            snapshot = await asyncio.wrap_future(step.future)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            return []
        except Exception as exc:
            if self._diarization_failed:
                return []
            self._diarization_failed = True  # told once; the transcript goes on
            return [
                Error(
                    ErrorCode.DIARIZATION_FAILED,
                    f"speaker labels stopped: a diarization step failed ({exc}); "
                    "transcription goes on, later speakers may be missing or stale",
                )
            ]
        return list(self._speakers.apply(snapshot))
