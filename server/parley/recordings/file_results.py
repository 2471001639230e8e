"""A recording's result, made from its decoded windows: the finals with their speakers
and words, and what the scheduler chose for it (pure: no threads, no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from parley.client.transcript import Transcript
from parley.core.asr import Transcription
from parley.core.audio import SAMPLE_RATE
from parley.core.packing import Piece, Window
from parley.core.speaker_timeline import TimelineSnapshot
from parley.core.vad import CloseReason, SegmentClosed, VadConfig, VadSegmenter
from parley.core.word_timing import WordTimingConfig, fit_to_speech, fit_words
from parley.core.words import TimedWord
from parley.protocol.messages import Final, FinalReason, Word
from parley.workers.decoding import StreamDecoding

VAD_CHUNK_S = 30.0  # the VAD reads a recording in pieces this long (any length would do)


@dataclass(frozen=True)
class DecodeReport:
    """What the scheduler chose for a recording, for callers that used to choose it."""

    windows: int
    segments: int
    mean_batch_rows: float  # rows per decoder step while the job ran (all traffic)
    draft_tokens: int  # drafts proposed for its windows (speculation)
    accepted_tokens: int

    @classmethod
    def of(
        cls, results: list[tuple[Window, Transcription]], segments: int, rows_per_step: float
    ) -> DecodeReport:
        """The report of a recording's decoded windows and segments."""
        return cls(
            len(results),
            segments,
            rows_per_step,
            sum(r.stats.drafted for _, r in results),
            sum(r.stats.accepted for _, r in results),
        )

    @property
    def assisted(self) -> bool:
        return self.draft_tokens > 0

    def to_json(self) -> dict:
        return {
            "windows": self.windows,
            "segments": self.segments,
            "mean_batch_rows": round(self.mean_batch_rows, 2),
            "assisted": self.assisted,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
        }


@dataclass(frozen=True)
class DecodeSigns:
    """The signs of the decode a final's words came from. As Whisper's segments carry
    their 30 s window's, the finals of one packed window share them."""

    seek: int  # where the window's audio begins in the recording, in 10 ms frames
    avg_logprob: float
    no_speech_prob: float
    compression_ratio: float  # of the decode's whole text
    temperature: float  # 0, or what a doubted decode was drawn at (Whisper's fallback)

    @classmethod
    def of(cls, window: Window, result: Transcription) -> DecodeSigns:
        """The signs of ``window``'s decode, ``result``."""
        return cls(
            round(window.pieces[0].start * 100),
            result.avg_logprob,
            result.no_speech_prob,
            result.compression_ratio,
            result.temperature,
        )


@dataclass(frozen=True)
class FileTranscript:
    """A recording's result: its finals with speakers, language and what decoding cost."""

    duration: float
    finals: tuple[Final, ...]
    speakers: tuple[str, ...]
    language: str | None
    report: DecodeReport
    signs: Mapping[int, DecodeSigns]  # each final's decode's, by its ``segment_id``
    processing_s: float = 0.0
    queue_wait_s: float = 0.0  # from the first window queued to the first decoded

    @property
    def text(self) -> str:
        return " ".join(f.text for f in self.finals if f.text).strip()

    def transcript(self) -> Transcript:
        """The finals as a client keeps them (``parley.client.transcript``): turns, and
        text, JSON, subtitles or RTTM through ``parley.client.formats``."""
        transcript = Transcript()
        for final in self.finals:
            transcript.apply(final)
        return transcript

    @property
    def words(self) -> list[Word]:
        return [w for f in self.finals for w in f.words]


@dataclass(frozen=True)
class Span:
    """The part of a recording a caller asks for (AssemblyAI's ``audio_start_from`` and
    ``audio_end_at``), in seconds; ``end_s`` None: to its end."""

    start_s: float = 0.0
    end_s: float | None = None

    def of(self, audio: np.ndarray) -> np.ndarray:
        """That part of ``audio`` (samples last), a view: no copy."""
        end = None if self.end_s is None else round(self.end_s * SAMPLE_RATE)
        return audio[..., round(self.start_s * SAMPLE_RATE) : end]


WHOLE = Span()  # the whole recording


def shifted(result: FileTranscript, offset_s: float) -> FileTranscript:
    """``result`` of a recording's part beginning ``offset_s`` into it, timed in the whole
    recording: every final, word and decode's window later by that much, and the duration
    the part's end."""
    if offset_s == 0:
        return result

    def later(word: Word) -> Word:
        return replace(word, start=word.start + offset_s, end=word.end + offset_s)

    finals = tuple(
        replace(
            f,
            start=f.start + offset_s,
            end=f.end + offset_s,
            words=[later(w) for w in f.words],
        )
        for f in result.finals
    )
    frames = round(offset_s * 100)
    signs = {k: replace(s, seek=s.seek + frames) for k, s in result.signs.items()}
    return replace(result, duration=result.duration + offset_s, finals=finals, signs=signs)


def segment_recording(
    audio: np.ndarray, vad: VadConfig, word_gap_s: float
) -> tuple[list[Piece], dict[int, CloseReason]]:
    """The stream's VAD over a whole recording: each speech segment as a ``Piece`` (its
    voiced regions joined across gaps of up to ``word_gap_s``: those its words are
    fitted to), and why each closed. A
    segment's copy of its audio goes as soon as it is read: kept, the copies were most
    of the recording again, for as long as the job ran (bench/README.md, "A long
    recording's memory")."""
    segmenter = VadSegmenter(vad)
    chunk = int(VAD_CHUNK_S * SAMPLE_RATE)
    pieces: list[Piece] = []
    reasons: dict[int, CloseReason] = {}

    def keep(events: list) -> None:
        for e in events:
            if isinstance(e, SegmentClosed):
                voiced = tuple(e.voiced_regions(word_gap_s))
                pieces.append(Piece(e.segment_id, e.start, e.end, voiced))
                reasons[e.segment_id] = e.reason

    for start in range(0, len(audio), chunk):
        keep(segmenter.push(audio[start : start + chunk]))
    keep(segmenter.flush(CloseReason.END_OF_STREAM))
    return pieces, reasons


def finals_of(
    results: list[tuple[Window, Transcription]],
    reasons: dict[int, CloseReason],
    speakers: TimelineSnapshot | None,
    timing: WordTimingConfig,
    decoding: StreamDecoding,
    names: Mapping[int, str] | None = None,
) -> tuple[list[Final], dict[int, DecodeSigns]]:
    """One final per speaker's run of words in each segment: the segment's own text when
    it had a window to itself and one speaker, else its words joined; each with its
    window's language, redacted as asked (a number read on across finals judged whole);
    and the signs of each final's decode, by its ``segment_id``."""
    heard: list[tuple[Piece, list[TimedWord], Window, Transcription]] = []
    for window, result in results:
        if result.rejected:
            continue
        fitted = fit_words(result.words, window.voiced_regions(), timing)
        for piece, words in zip(window.pieces, window.place(fitted)):
            if words:
                heard.append((piece, words, window, result))
    finals: list[Final] = []
    signs: dict[int, DecodeSigns] = {}
    # A piece decoded again (``Window.unheard``) has its words from its own decode.
    for piece, words, window, result in sorted(heard, key=lambda h: h[0].start):
        if speakers is not None:  # as a live final's words: placed in speech
            speech = speakers.speech(piece.start, piece.end)
            spans = fit_to_speech([(w.start, w.end) for w in words], speech, timing)
            words = [TimedWord(w.word, a, b, w.probability) for w, (a, b) in zip(words, spans)]
        runs = _speaker_runs(words, speakers, names or {})
        for i, (run, label) in enumerate(runs):
            first, last = i == 0, i == len(runs) - 1
            alone = len(window.pieces) == 1 and len(runs) == 1
            labelled = decoding.respelled(
                [
                    Word(
                        w.word,
                        round(w.start, 3),
                        round(w.end, 3),
                        round(w.probability, 3),
                        label,
                    )
                    for w in run
                ],
                result.heard_keyterms,
            )
            signs[len(finals)] = DecodeSigns.of(window, result)
            finals.append(
                Final(
                    len(finals),
                    round(piece.start if first else run[0].start, 3),
                    round(piece.end if last else run[-1].end, 3),
                    decoding.text(result.text, labelled)
                    if alone
                    else " ".join(w.word for w in labelled),
                    FinalReason(reasons[piece.segment_id].value)
                    if last
                    else FinalReason.SPEAKER_CHANGE,
                    labelled,
                    label,
                    **decoding.language_fields(result),
                )
            )
    return decoding.finals(finals), signs


def _speaker_runs(
    words: list[TimedWord], speakers: TimelineSnapshot | None, names: Mapping[int, str]
) -> list[tuple[list[TimedWord], str | None]]:
    """The segment's words in runs of one speaker (one run without speakers; a word
    nobody overlaps takes its neighbour's speaker), each labelled with its name where it
    is a known speaker's, else S1, S2..."""
    if not words:
        return []
    if speakers is None:
        return [(list(words), None)]
    labels: list[str | None] = []
    for word in words:
        k = speakers.speaker_of(word.start, word.end)
        labels.append(None if k is None else names.get(k, f"S{k + 1}"))
    for i, label in enumerate(labels):
        if label is None:
            labels[i] = next((x for x in labels[i::-1] if x), None) or next(
                (x for x in labels[i:] if x), None
            )
    runs: list[tuple[list[TimedWord], str | None]] = []
    for word, label in zip(words, labels):
        if runs and runs[-1][1] == label:
            runs[-1][0].append(word)
        else:
            runs.append(([word], label))
    return runs
