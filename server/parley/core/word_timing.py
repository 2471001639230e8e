"""Word times that follow speech: cross-attention times fitted to the VAD's voiced audio.

Whisper's alignment heads place words well inside speech but stretch them over
pauses and into the pad around a segment, and often end a phrase's last word early.
Four corrections, all in seconds from the segment start:

1. openai-whisper's duration limit, on the aligner's times: the median word duration
   (at most ``median_cap_s``) times ``max_duration_factor``. A longer word is shortened
   from the side that faces a pause or a sentence end: its end if it ends a sentence
   or precedes a pause, else its start.
2. Each word is clipped to the voiced region it overlaps most (regions part at an
   unvoiced gap longer than ``WordTimingConfig.word_gap_s``), so no word runs on into a
   pause; a word that overlaps no voiced audio moves to the edge of the nearest region.
3. The first word of each voiced region starts where the region does, and its last
   word ends where it does: the VAD, not the aligner, knows where speech begins and ends.
4. Words stay in order and never overlap.

Where a noise the VAD takes for voice (a crowd, music) fills the pauses, the voiced
regions run through them and so do the words, and the aligner, with no pause to hold
to, lets them drift late. With speaker labels on, the speaker segmentation, which
tells speech from such noise, places them once more (``fit_to_speech``): each word is
cut back to the stretch of speech it overlaps, and where a stretch's words start well
after its speech, the words left in the noise before them move into it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from parley.core.words import SENTENCE_ENDS, TimedWord


@dataclass(frozen=True)
class WordTimingConfig:
    """How word times are fitted to the audio the VAD heard as speech."""

    bridge_s: float = 0.3  # unvoiced gaps up to this long are inside speech
    # ...but one longer than this, even inside speech, ends the word before it and
    # starts the word after it: the voiced regions words are fitted to part there. The
    # aligner runs a word on into a short pause (bench/VARIANTS.md, "Word ends before a
    # pause": 0.06 to 0.1 s put 0.92 of those words' ends within 0.2 s, 0.3 s 0.80).
    word_gap_s: float = 0.1
    # How far past the speaker segmentation's speech a word may reach: its frames are
    # averaged over windows and its edges come late or early by about a tenth of a second.
    speech_margin_s: float = 0.1
    median_cap_s: float = 0.7  # openai-whisper: the median word duration, capped
    max_duration_factor: float = 2.0  # ...and twice it is the longest a word may last

    def __post_init__(self) -> None:
        if self.bridge_s < 0 or self.median_cap_s <= 0 or self.max_duration_factor < 1:
            raise ValueError("word timing: bridge_s ≥ 0, median_cap_s > 0, factor ≥ 1")
        if not 0 <= self.word_gap_s <= self.bridge_s:
            raise ValueError("word timing: 0 ≤ word_gap_s ≤ bridge_s")
        if self.speech_margin_s < 0:
            raise ValueError("word timing: speech_margin_s ≥ 0")


Region = tuple[float, float]


def fit_words(
    words: Sequence[TimedWord],
    regions: Sequence[Region],
    config: WordTimingConfig = WordTimingConfig(),
) -> list[TimedWord]:
    """``words`` with times fitted to the voiced ``regions`` (sorted, disjoint)."""
    if not words:
        return []
    fitted = _limit_durations(list(words), config)
    if regions:
        fitted = _to_region_edges([_into_speech(w, regions) for w in fitted], regions)
    return _in_order(fitted)


def _to_region_edges(words: list[TimedWord], regions: Sequence[Region]) -> list[TimedWord]:
    out = list(words)
    for start, end in regions:
        inside = [i for i, w in enumerate(out) if start <= w.start and w.end <= end]
        if inside:
            first, last = inside[0], inside[-1]
            out[first] = _timed(out[first], start, out[first].end)
            out[last] = _timed(out[last], out[last].start, end)
    return out


def _into_speech(word: TimedWord, regions: Sequence[Region]) -> TimedWord:
    clipped = _clipped(word.start, word.end, regions)
    if clipped is not None:
        return _timed(word, *clipped)
    # In no voiced audio: to the nearest edge of the nearest region, as short as it was.
    middle = (word.start + word.end) / 2
    start, end = min(regions, key=lambda r: max(r[0] - middle, middle - r[1], 0.0))
    length = min(word.end - word.start, end - start)
    if middle < start:
        return _timed(word, start, start + length)
    return _timed(word, end - length, end)


def _clipped(start: float, end: float, regions: Sequence[Region]) -> Region | None:
    """[start, end] cut back to the region that holds its middle, else to the one it
    overlaps most (None: it overlaps none)."""
    middle = (start + end) / 2
    holding = [r for r in regions if r[0] <= middle <= r[1]]  # zero-length words overlap none
    overlaps = [min(end, b) - max(start, a) for a, b in regions]
    best = max(range(len(regions)), key=overlaps.__getitem__)
    if not holding and overlaps[best] <= 0:
        return None
    a, b = holding[0] if holding else regions[best]
    return max(start, a), min(end, b)


def fit_to_speech(
    spans: Sequence[Region], speech: Sequence[Region], config: WordTimingConfig
) -> list[Region]:
    """Word ``spans`` (in order) placed in ``speech`` (sorted, disjoint), that speech
    widened by ``speech_margin_s`` and its gaps up to ``bridge_s`` bridged into stretches:

    - a span is cut back to the stretch it overlaps most (or that holds its middle);
    - where a stretch's first word starts more than ``bridge_s`` after its speech does,
      the words drifted late over a noise the VAD took for voice: the words in no
      stretch just before it move into that drift, in order, as long as they were (or
      shortened alike to fit it), the first of them (or the first word) starting with
      the speech;
    - any other span in no stretch stays as it was (the segmentation may miss a quiet
      word: that is no reason to move it);
    - the spans stay in order and never overlap.

    With no speech at all (the segmentation heard none) the spans stay as they are."""
    margin = config.speech_margin_s
    stretches = joined([(a - margin, b + margin) for a, b in speech], config.bridge_s)
    if not stretches:
        return list(spans)
    placed = [_clipped(start, end, stretches) for start, end in spans]
    for a, b in stretches:
        inside = [i for i, p in enumerate(placed) if p is not None and a <= p[0] and p[1] <= b]
        if not inside or spans[inside[0]][0] - (a + margin) <= config.bridge_s:
            continue
        lead = inside[0]  # the stretch's first word; the words in no stretch before it:
        first = lead
        while first > 0 and placed[first - 1] is None:
            first -= 1
        # ... move into the drift's room, in order, squeezed alike where they overfill it
        at, room = a + margin, spans[lead][0] - (a + margin)
        lengths = [spans[i][1] - spans[i][0] for i in range(first, lead)]
        scale = min(1.0, room / sum(lengths)) if sum(lengths) > 0 else 1.0
        for i, length in zip(range(first, lead), lengths):
            end = at + length * scale
            placed[i], at = (at, end), end
        _, lead_end = placed[lead] or spans[lead]
        placed[lead] = (min(at, lead_end), lead_end)
    ordered: list[Region] = []
    for span, given in zip(placed, spans):
        start, end = span or given
        start = max(start, ordered[-1][1]) if ordered else start
        ordered.append((start, max(start, end)))
    return ordered


def joined(regions: Sequence[Region], gap_s: float = 0.0) -> list[Region]:
    """``regions`` (sorted by start) with those that overlap, or lie at most ``gap_s``
    apart, joined into one."""
    out: list[Region] = []
    for start, end in regions:
        if out and start - out[-1][1] <= gap_s:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _limit_durations(words: list[TimedWord], config: WordTimingConfig) -> list[TimedWord]:
    durations = [w.end - w.start for w in words if w.end > w.start]
    if not durations:
        return words
    longest = config.max_duration_factor * min(statistics.median(durations), config.median_cap_s)
    out = list(words)
    for i, w in enumerate(out):
        if w.end - w.start <= longest:
            continue
        follows_pause = (
            i == 0
            or out[i - 1].word.endswith(SENTENCE_ENDS)
            or w.start - out[i - 1].end > config.bridge_s
        )
        precedes_pause = (
            i == len(out) - 1
            or w.word.endswith(SENTENCE_ENDS)
            or out[i + 1].start - w.end > config.bridge_s
        )
        if precedes_pause or not follows_pause:
            out[i] = _timed(w, w.start, w.start + longest)
        else:
            out[i] = _timed(w, w.end - longest, w.end)
    return out


def _in_order(words: list[TimedWord]) -> list[TimedWord]:
    out: list[TimedWord] = []
    for w in words:
        start = max(w.start, out[-1].end) if out else w.start
        out.append(_timed(w, start, max(w.end, start)))
    return out


def _timed(word: TimedWord, start: float, end: float) -> TimedWord:
    return TimedWord(word.word, start, end, word.probability)
