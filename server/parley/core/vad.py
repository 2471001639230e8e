"""Speech segmentation with webrtcvad: audio in, speech segments out (pure and synchronous).

Stream time is counted in samples at 16 kHz from the first sample received, so
every time this module reports is monotonic and exact. Buffers are preallocated
and bounded: a segment never holds more than ``max_segment_s`` of audio.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import Enum

import numpy as np
import webrtcvad

from parley.core.audio import MAX_SEGMENT_S, SAMPLE_RATE, WHISPER_WINDOW_S
from parley.core.segment_buffer import SegmentBuffer


class CloseReason(str, Enum):
    """Why a segment closed."""

    SILENCE = "silence"
    MAX_LENGTH = "max_length"
    SPEAKER_CHANGE = "speaker_change"
    FINALIZE = "finalize"
    END_OF_STREAM = "end_of_stream"


@dataclass(frozen=True)
class VadConfig:
    """The voice activity detector's settings and the segments' bounds."""

    aggressiveness: int = 3
    frame_ms: int = 30
    speech_pad_ms: int = 300
    min_speech_ms: int = 150
    min_silence_ms: int = 300
    max_segment_s: float = 15.0
    cut_search_s: float = 1.0  # where a too-long segment looks for its quietest cut point

    def __post_init__(self) -> None:
        if self.aggressiveness not in (0, 1, 2, 3):
            raise ValueError("VAD aggressiveness must be 0, 1, 2 or 3")
        if self.frame_ms not in (10, 20, 30):
            raise ValueError("VAD frame_ms must be 10, 20 or 30")
        if self.min_speech_ms < self.frame_ms or self.min_silence_ms < self.frame_ms:
            raise ValueError("min_speech_ms and min_silence_ms must be at least one frame")
        if self.speech_pad_ms > self.min_silence_ms:
            raise ValueError(
                "speech_pad_ms cannot exceed min_silence_ms: the end pad is "
                "taken from the silence that closes the segment"
            )
        if not 2 * self.cut_search_s < self.max_segment_s <= MAX_SEGMENT_S:
            raise ValueError(
                f"max_segment_s must be between 2 × cut_search_s and {MAX_SEGMENT_S:g} s "
                f"(Whisper reads at most {WHISPER_WINDOW_S:g} s at once)"
            )

    @property
    def frame_samples(self) -> int:
        return SAMPLE_RATE * self.frame_ms // 1000

    def frames(self, ms: float) -> int:
        return max(1, math.ceil(ms / self.frame_ms))


def quietest_cut(audio: np.ndarray, frame: int, first: int, last: int) -> int:
    """The sample just after the quietest of ``audio``'s frames [first, last)."""
    frames = audio[first * frame : last * frame].reshape(last - first, frame)
    return (first + int(np.argmin((frames**2).mean(axis=1))) + 1) * frame


@dataclass(frozen=True)
class SpeechStart:
    """Voice activity opened a segment."""

    segment_id: int
    start: float


@dataclass(frozen=True)
class SegmentClosed:
    """A segment's audio is complete, and why it ended."""

    segment_id: int
    start: float
    end: float
    audio: np.ndarray
    reason: CloseReason
    voiced: np.ndarray  # one flag per VAD frame of ``audio`` (the last frame may be short)
    frame_s: float

    def voiced_regions(self, bridge_s: float) -> list[tuple[float, float]]:
        """[start, end) seconds from the segment start of voiced audio, joining runs whose
        unvoiced gap is at most ``bridge_s``."""
        regions: list[tuple[float, float]] = []
        for index in np.flatnonzero(self.voiced):
            start, end = (
                index * self.frame_s,
                min((index + 1) * self.frame_s, len(self.audio) / SAMPLE_RATE),
            )
            if regions and start - regions[-1][1] <= bridge_s + 1e-9:
                regions[-1] = (regions[-1][0], end)
            else:
                regions.append((start, end))
        return regions

    @property
    def speech_end(self) -> float:
        """Stream time where its last voiced frame ends (its end if none was voiced)."""
        regions = self.voiced_regions(0.0)
        return self.start + regions[-1][1] if regions else self.end


@dataclass(frozen=True)
class OpenSegment:
    """The audio of the segment still open, for its partial."""

    segment_id: int
    start: float
    end: float
    audio: np.ndarray  # a copy: the caller may keep it while the segment grows


VadEvent = SpeechStart | SegmentClosed


class VadSegmenter:
    """Turns a stream of 16 kHz float32 audio into speech segments.

    Speech starts when ``min_speech_ms`` of voiced frames fall within twice that
    span; it is closed by ``min_silence_ms`` of unvoiced frames, by reaching
    ``max_segment_s`` (cut at the quietest frame of the last ``cut_search_s``, the
    rest carried into the next segment), or by ``flush``. Each segment has
    ``speech_pad_ms`` of audio around its speech where the stream allows.
    """

    def __init__(self, config: VadConfig):
        self.config = config
        self._vad = webrtcvad.Vad(config.aggressiveness)
        self._frame = config.frame_samples
        self._pad_frames = config.frames(config.speech_pad_ms)
        self._trigger_frames = config.frames(config.min_speech_ms)
        self._trigger_window = 2 * self._trigger_frames
        self._silence_frames = config.frames(config.min_silence_ms)
        self._max_samples = int(config.max_segment_s * SAMPLE_RATE) // self._frame * self._frame
        # Frames heard while idle: the pad before speech, and the window that triggers it.
        self._recent: deque[tuple[np.ndarray, bool]] = deque(
            maxlen=self._pad_frames + self._trigger_window
        )
        self._pending = np.zeros(self._frame, dtype=np.float32)
        self._pending_len = 0
        self._segment = SegmentBuffer(self._max_samples + self._frame, self._frame)
        self._speaking = False
        self._trailing_silence = 0
        self._next_id = 0
        self._samples_seen = 0  # whole frames classified so far
        self._last_end_sample = 0

    # ------------------------------------------------------------------ public

    @property
    def stream_time(self) -> float:
        """Seconds of audio received, including any partial frame not yet classified."""
        return (self._samples_seen + self._pending_len) / SAMPLE_RATE

    @property
    def speaking(self) -> bool:
        """Whether a segment is open (speech started and has not ended)."""
        return self._speaking

    def push(self, audio: np.ndarray) -> list[VadEvent]:
        """Feed 16 kHz float32 audio; the speech starts and closed segments it caused."""
        events: list[VadEvent] = []
        audio = np.asarray(audio, dtype=np.float32)
        offset = 0
        while offset < len(audio):
            take = min(self._frame - self._pending_len, len(audio) - offset)
            self._pending[self._pending_len : self._pending_len + take] = audio[
                offset : offset + take
            ]
            self._pending_len += take
            offset += take
            if self._pending_len == self._frame:
                self._pending_len = 0
                self._on_frame(self._pending.copy(), events)
        return events

    def push_silence(self, samples: int) -> list[VadEvent]:
        """The same as ``push(np.zeros(samples))``, at a cost that does not grow with
        ``samples`` (a gap in a timed track may be an hour): once zeros have closed any
        open segment and filled the frames kept while idle, more zeros only move the
        clock."""
        settle = (self._silence_frames + (self._recent.maxlen or 0) + 2) * self._frame
        head = min(samples, settle)
        events = self.push(np.zeros(head, dtype=np.float32))
        rest = samples - head
        if rest > 0:
            assert not self._speaking  # zeros are never voiced, and settle closed it
            pending = self._pending_len + rest  # the pending samples are zeros by now
            self._samples_seen += pending // self._frame * self._frame
            self._pending_len = pending % self._frame
        return events

    def open_segment(self) -> OpenSegment | None:
        """The segment being spoken, its audio so far copied (for a partial), or None."""
        if not self._speaking:
            return None
        seg = self._segment
        return OpenSegment(
            self._next_id - 1,
            seg.start_sample / SAMPLE_RATE,
            (seg.start_sample + seg.length) / SAMPLE_RATE,
            seg.view().copy(),
        )

    def open_span(self) -> tuple[float, float] | None:
        """Stream times [start, end) of the open segment (None: nobody is speaking)."""
        if not self._speaking:
            return None
        seg = self._segment
        return seg.start_sample / SAMPLE_RATE, (seg.start_sample + seg.length) / SAMPLE_RATE

    def flush(self, reason: CloseReason) -> list[VadEvent]:
        """Close the open segment now, with any partial frame still pending in it."""
        if not self._speaking:
            return []
        if self._pending_len:
            tail = self._pending[: self._pending_len].copy()
            self._samples_seen += self._pending_len
            self._pending_len = 0
            self._segment.append(tail, True)  # the client cut it off: count it as speech
            self._segment.last_voiced_end = self._segment.length
        end = self._segment.length  # all of it: the client asked, so keep every sample
        return [self._close(end, reason)]

    # ------------------------------------------------------------------ internals

    def _is_speech(self, frame: np.ndarray) -> bool:
        pcm = (np.clip(frame, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()
        return self._vad.is_speech(pcm, SAMPLE_RATE)

    def _on_frame(self, frame: np.ndarray, events: list[VadEvent]) -> None:
        voiced = self._is_speech(frame)
        frame_start = self._samples_seen
        self._samples_seen += len(frame)
        if self._speaking:
            self._grow(frame, voiced, events)
            return
        self._recent.append((frame, voiced))
        window = list(self._recent)[-self._trigger_window :]
        if sum(v for _, v in window) >= self._trigger_frames:
            first_voiced = next(i for i, (_, v) in enumerate(window) if v)
            self._start(frame_start, len(window) - first_voiced, events)

    def _start(self, last_frame_start: int, speech_frames: int, events: list[VadEvent]) -> None:
        recent = list(self._recent)
        keep = min(len(recent), speech_frames + self._pad_frames)
        first_sample = last_frame_start + self._frame - keep * self._frame
        skip = 0
        # The pad never reaches back into the previous segment.
        while first_sample < self._last_end_sample and skip < keep - speech_frames:
            first_sample += self._frame
            skip += 1
        self._open(first_sample, events)
        for frame, voiced in recent[len(recent) - keep + skip :]:
            self._segment.append(frame, voiced)
        self._segment.last_voiced_end = self._segment.length
        self._recent.clear()

    def _open(self, first_sample: int, events: list[VadEvent]) -> None:
        self._segment.reset(first_sample)
        self._speaking = True
        self._trailing_silence = 0
        events.append(SpeechStart(self._next_id, first_sample / SAMPLE_RATE))
        self._next_id += 1

    def _grow(self, frame: np.ndarray, voiced: bool, events: list[VadEvent]) -> None:
        seg = self._segment
        seg.append(frame, voiced)
        if voiced:
            seg.last_voiced_end = seg.length
            self._trailing_silence = 0
        else:
            self._trailing_silence += 1
        if self._trailing_silence >= self._silence_frames:
            end = min(seg.length, seg.last_voiced_end + self._pad_frames * self._frame)
            tail = seg.view()[end:].copy()
            events.append(self._close(end, CloseReason.SILENCE))
            # The silence after the end pad can serve as the next segment's pre-roll.
            for i in range(0, len(tail), self._frame):
                self._recent.append((tail[i : i + self._frame], False))
        elif seg.length >= self._max_samples:
            self._cut(events)

    def _cut(self, events: list[VadEvent]) -> None:
        search = int(self.config.cut_search_s * SAMPLE_RATE) // self._frame
        frames = self._segment.length // self._frame
        self._cut_in(frames - search, frames, CloseReason.MAX_LENGTH, events)

    def _cut_in(self, first: int, last: int, reason: CloseReason, events: list[VadEvent]) -> None:
        """Close the segment just after its quietest frame in [first, last) and go on
        with the rest in a new one."""
        seg = self._segment
        audio = seg.view()
        cut = quietest_cut(audio, self._frame, first, last)
        rest, rest_voiced = audio[cut:].copy(), seg.voiced(cut)
        carried_voiced = max(0, seg.last_voiced_end - cut)
        events.append(self._close(cut, reason))
        self._open(self._last_end_sample, events)
        self._segment.append(rest, rest_voiced)
        self._segment.last_voiced_end = carried_voiced

    def cut_at(self, time: float, search_s: float) -> list[VadEvent]:
        """Close the open segment near stream time ``time`` (at the quietest frame within
        ``search_s`` of it) because the speaker changed there; the speech goes on in a new
        segment. Nothing happens unless ``time`` is well inside the open segment."""
        if not self._speaking:
            return []
        seg = self._segment
        frames = seg.length // self._frame
        at = int(round((time * SAMPLE_RATE - seg.start_sample) / self._frame))
        reach = max(1, int(search_s * SAMPLE_RATE) // self._frame)
        first, last = max(1, at - reach), min(frames - 1, at + reach + 1)
        if first >= last:
            return []
        events: list[VadEvent] = []
        self._cut_in(first, last, CloseReason.SPEAKER_CHANGE, events)
        return events

    def _close(self, end: int, reason: CloseReason) -> SegmentClosed:
        seg = self._segment
        start_sample = seg.start_sample
        end_sample = start_sample + end
        closed = SegmentClosed(
            self._next_id - 1,
            start_sample / SAMPLE_RATE,
            end_sample / SAMPLE_RATE,
            seg.view(end).copy(),
            reason,
            seg.voiced(0, end),
            self._frame / SAMPLE_RATE,
        )
        self._last_end_sample = end_sample
        self._speaking = False
        self._trailing_silence = 0
        return closed
