"""One client's stream: audio in, ordered protocol messages out, no transport involved.

A session can be driven in-process at any speed (tests and benchmarks do): call
``feed``/``feed_audio``, ``finalize`` and ``end``, and read ``messages()``.
Messages come out in stream order: each decode is queued as a future in one
bounded outbox, and the reader awaits them in turn.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import AsyncIterator

import numpy as np

from parley.core.asr import Transcription
from parley.core.audio import SAMPLE_RATE
from parley.core.speech_level import SpeechLevel
from parley.core.vad import CloseReason, SegmentClosed, SpeechStart, VadConfig, VadSegmenter
from parley.core.word_timing import fit_words
from parley.core.words import shift_words
from parley.protocol.audio import AudioDecoder
from parley.protocol.messages import (
    EndReason,
    Error,
    ErrorCode,
    Final,
    Finalized,
    FinalReason,
    Partial,
    ProtocolError,
    SegmentEnded,
    ServerMessage,
    SessionEnded,
    SpeechStarted,
    StreamConfig,
    Word,
)
from parley.sessions.decode_hints import DecodeHints
from parley.sessions.marks import Mark, MarkPayload
from parley.sessions.session_options import SessionOptions
from parley.sessions.session_outbox import SessionOutbox
from parley.sessions.speaker_track import SpeakerTrack
from parley.sessions.voice_parts import submit_by_voice
from parley.workers.decoding import StreamDecoding
from parley.workers.scheduler import AsrScheduler

log = logging.getLogger(__name__)


class Session:
    """One stream: its audio in, its ordered messages out (segments, partials, finals)."""

    def __init__(
        self,
        config: StreamConfig,
        worker: AsrScheduler,
        options: SessionOptions,
        speakers: SpeakerTrack | None = None,
        speaker: str | None = None,
        offset_s: float = 0.0,
    ):
        """``speakers`` labels a diarized stream; ``speaker`` is the one speaker of a
        stream that carries one person (a phone line, a meeting participant);
        ``offset_s`` is where the stream starts in the time its messages are told in
        (a meeting participant who joins late)."""
        if config.diarization and speakers is None:
            raise ValueError("a diarized session needs a SpeakerTrack")
        if speakers is not None and speaker is not None:
            raise ValueError("a session is diarized or has one speaker, not both")
        self.config = config
        self.speakers = speakers  # a diarized stream's labels (known speakers, too)
        self._speaker = speaker
        self._offset_s = offset_s
        self._worker = worker
        self._options = options
        self._decoding = self._decoding_of(config)
        self._decoder = AudioDecoder(config)
        self._vad = VadSegmenter(options.vad)
        self._heard_audio = False
        self._outbox = SessionOutbox(
            speakers, speaker, offset_s, options.final_latency, options.audio_settled
        )
        self._partial: concurrent.futures.Future | None = None
        self._hints = DecodeHints(options.hypothesis_drafts, options.context_tokens)
        self._level = SpeechLevel(worker.engine.guards)  # its finals', judged in order
        self._partial_end = 0.0  # stream time covered by the last partial asked for
        self._wants_partials = False  # counted by the worker while a segment is open
        self._segments = 0
        self._quiet_since: float | None = None  # end of the last segment, while no speech is open
        self.last_audio_at = time.monotonic()  # when audio last came (for merging tracks)
        self._ended = False

    # ------------------------------------------------------------------ input

    @property
    def stream_time(self) -> float:
        """Audio received, in seconds."""
        return self._vad.stream_time

    @property
    def counted_streams(self) -> int:
        """What the connection counts for in the live load: one stream."""
        return 1

    @property
    def decoding(self) -> bool:
        """Whether a closed segment's final is still to be sent."""
        return self._outbox.oldest_unsent_end is not None

    def settled_until(self) -> float:
        """The time (in message time) before which this stream has no final left to send:
        the end of its oldest closed segment still decoding, else the audio received."""
        unsent = self._outbox.oldest_unsent_end
        return (self.stream_time if unsent is None else unsent) + self._offset_s

    @property
    def segments(self) -> int:
        """Segments closed so far (each has or will have its final)."""
        return self._segments

    @property
    def quiet_since(self) -> float | None:
        """While no speech is open: the stream time the last segment ended (None before the
        first segment, and during speech)."""
        return self._quiet_since

    def reconfigure(self, config: StreamConfig, vad: VadConfig | None = None) -> None:
        """New settings for what follows: the language and partials at any time; the
        audio format and the VAD only before the first audio (ProtocolError after)."""
        self._check_open()
        vad = vad or self._vad.config
        audio_changes = config.audio_format != self.config.audio_format
        if self._heard_audio and (audio_changes or vad != self._vad.config):
            raise ProtocolError(
                ErrorCode.BAD_CONFIG,
                "the audio format and turn detection cannot change once audio has been sent",
            )
        if config.diarization != self.config.diarization:
            raise ProtocolError(ErrorCode.BAD_CONFIG, "diarization is chosen when connecting")
        if config.partials != self.config.partials:
            self._stop_wanting_partials()  # the next speech start asks again if wanted
        self._decoding = self._decoding_of(config)
        self.config = config
        if audio_changes:
            self._decoder = AudioDecoder(config)
        if vad != self._vad.config:
            self._vad = VadSegmenter(vad)

    async def feed(self, frame: bytes) -> None:
        """One binary message from the client (ProtocolError if it is malformed)."""
        await self.feed_audio(self._decoder.decode(frame))

    async def feed_audio(self, samples: np.ndarray) -> None:
        """16 kHz mono float32 audio; waits when the ASR worker is full (back-pressure)."""
        self._check_open()
        self._heard_audio = True
        self.last_audio_at = time.monotonic()
        self._outbox.arrived(self.stream_time + len(samples) / SAMPLE_RATE)
        if self.speakers is not None:  # first, so a final closed by this audio is labelled
            for step in await self.speakers.push(samples):  # from windows that include it
                await self._outbox.put_speakers(step)
        for event in self._vad.push(samples):
            await self._on_event(event)
        await self._end_at_turn_change()
        await self._maybe_partial()

    async def skip_silence(self, seconds: float) -> None:
        """``seconds`` of digital silence after the audio so far (a gap in a timed
        track, which carries one speaker), told to the VAD at a cost that does not grow
        with the gap."""
        self._check_open()
        if self.speakers is not None:  # its speaker windows would need every sample
            raise ValueError("a diarized stream cannot skip silence")
        samples = round(seconds * SAMPLE_RATE)
        self.last_audio_at = time.monotonic()
        for event in self._vad.push_silence(samples):
            await self._on_event(event)
        self._outbox.arrived(self.stream_time)

    async def _end_at_turn_change(self) -> None:
        """With speakers, a segment ends where a settled turn passes to another speaker."""
        span = self._vad.open_span()
        if self.speakers is None or span is None:
            return
        change = self.speakers.turn_change(*span)
        if change is not None:
            for event in self._vad.cut_at(change, self.speakers.cut_search_s):
                await self._on_event(event)

    async def finalize(self) -> None:
        """Close the open segment now; a ``finalized`` message follows its final."""
        self._check_open()
        for event in self._vad.flush(CloseReason.FINALIZE):
            await self._on_event(event)
        await self._outbox.put(Finalized(audio_end=self.stream_time))

    async def end(self, reason: EndReason = EndReason.END_OF_STREAM) -> None:
        """End of stream: decode what is left, then ``session_ended``; messages() then ends."""
        await self.feed_audio(self._decoder.finish())  # what the resampler still held
        for event in self._vad.flush(CloseReason.END_OF_STREAM):
            await self._on_event(event)
        if self.speakers is not None:
            await self._outbox.put_speakers(await self.speakers.finish())
        self._ended = True
        await self._outbox.put(
            SessionEnded(audio_duration=self.stream_time, segments=self._segments, reason=reason)
        )
        await self._outbox.end()

    async def report(self, error: Error) -> None:
        """A non-fatal error, sent in stream order with the results."""
        await self._outbox.put(error)

    async def mark(self, payload: MarkPayload) -> None:
        """Queue ``Mark(payload)`` behind everything queued so far (see ``Mark``)."""
        await self._outbox.put(Mark(payload, self.stream_time))

    def close(self) -> None:
        """The client is gone: cancel work that has not finished."""
        self._ended = True
        self._stop_wanting_partials()
        if self._partial is not None:
            self._partial.cancel()
        self._outbox.cancel()

    def _decoding_of(self, config: StreamConfig) -> StreamDecoding:
        try:
            return StreamDecoding.of(config, self._worker.engine)
        except ValueError as exc:
            raise ProtocolError(ErrorCode.BAD_CONFIG, str(exc)) from None

    def _check_open(self) -> None:
        if self._ended:
            raise RuntimeError("the session has ended")

    def messages(self) -> AsyncIterator[ServerMessage | Mark]:
        """Server messages (and marks) in stream order, until (and including)
        ``session_ended``."""
        return self._outbox.messages()

    # ------------------------------------------------------------------ internals

    async def _on_event(self, event) -> None:
        if isinstance(event, SpeechStart):
            self._quiet_since = None
            self._partial_end = event.start
            if self.config.partials and not self._wants_partials:
                self._wants_partials = True
                self._worker.want_partials(+1)
            await self._outbox.put(SpeechStarted(event.segment_id, event.start))
        elif isinstance(event, SegmentClosed):
            self._quiet_since = event.end
            self._stop_wanting_partials()
            await self._outbox.put(
                SegmentEnded(event.segment_id, event.end, FinalReason(event.reason.value))
            )
            await self._submit_final(event)

    def _stop_wanting_partials(self) -> None:
        if self._wants_partials:
            self._wants_partials = False
            self._worker.want_partials(-1)

    async def _submit_final(self, segment: SegmentClosed) -> None:
        self._outbox.final_due(segment.end)  # first: the submit below may wait
        if self.speakers is not None:
            step = await self.speakers.catch_up(segment.speech_end)
            if step is not None:
                await self._outbox.put_speakers(step)
        draft = self._hints.draft_for(segment.segment_id)
        if self._partial is not None:
            self._partial.cancel()  # queued or mid-decode: it leaves at the next step
            self._partial = None
        decoding = self._decoding
        request = decoding.request(
            segment.audio, with_words=True, draft=draft, context=self._hints.context()
        )
        realtime = self._outbox.arrivals.realtime()
        future = await submit_by_voice(self._worker, request, segment, self.speakers, realtime)
        self._hints.final(future)
        self._segments += 1
        reason = FinalReason(segment.reason.value)
        timing = self._options.word_timing

        def to_final(result: Transcription) -> Final:
            result = self._level.final(result, segment.audio)
            fitted = fit_words(result.words, segment.voiced_regions(timing.word_gap_s), timing)
            words = decoding.respelled(
                [
                    Word(w.word, w.start, w.end, w.probability)
                    for w in shift_words(fitted, segment.start, segment.end)
                ],
                result.heard_keyterms,
            )
            return Final(  # redaction and numerals on its way out (SessionOutbox)
                segment.segment_id,
                segment.start,
                segment.end,
                decoding.text(result.text, words),
                reason,
                words,
                **decoding.language_fields(result),
            )

        await self._outbox.put_decode(
            future, to_final, segment.segment_id, is_final=True, decoding=decoding
        )

    async def _maybe_partial(self) -> None:
        if not self.config.partials:
            return
        if self._partial is not None and not self._partial.done():
            return  # one at a time: the next one covers the newer audio anyway
        span = self._vad.open_span()
        interval = self._worker.partial_interval(self._options.partial_interval_s)
        if span is None or span[1] - self._partial_end < interval:
            return  # decided before the open segment's audio is copied
        segment = self._vad.open_segment()
        assert segment is not None
        decoding = self._decoding
        request = decoding.request(
            segment.audio,
            with_words=False,
            draft=self._hints.draft_for(segment.segment_id),
            context=self._hints.context(),
        )
        future = await self._worker.try_submit_partial(request)
        if future is None:
            return  # a final waits: skip this partial, never a final
        self._partial = future
        self._hints.partial(future, segment.segment_id)
        self._partial_end = segment.end

        def to_partial(result: Transcription) -> Partial:
            text = self._level.judged(result, segment.audio).text  # redacted on its way out
            return Partial(
                segment.segment_id,
                segment.start,
                segment.end,
                text,
                language=result.language,
                confidence=round(result.confidence, 3) if text else None,
            )

        await self._outbox.put_decode(
            future, to_partial, segment.segment_id, is_final=False, decoding=decoding
        )
