"""One session's diarization, seen from the event loop: feeding steps, labelling results.

The diarization thread owns the session's ``StreamDiarizer``; this object only keeps
the audio window to send it, the latest immutable timeline snapshots, the labels the
client has seen (``SpeakerLabels``), and the finals whose speakers may still change,
so that a later snapshot can revise them with a ``speaker_update``. At checkpoints and
at the end of the stream, a step's closing timeline (the stream's voices so far
clustered at once, ``speaker_relabel``; at the end of a stream too short for that, its
live timeline with every merge applied) relabels every settled final it covers: at a
checkpoint keeping the labels the client has seen where it can, at the end numbered
afresh in order of appearance; the live speakers that take over its speakers keep
their labels from then on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from parley.core.audio import SAMPLE_RATE
from parley.core.ring import AudioRing
from parley.core.speaker_count import SpeakerCount
from parley.core.speaker_labels import SpeakerLabels
from parley.core.speaker_names import embedded_clip
from parley.core.speaker_timeline import TimelineSnapshot, TurnsByTime
from parley.core.turns import ChangeCuts, parts_at, smooth_labels
from parley.core.word_timing import WordTimingConfig, fit_to_speech
from parley.protocol.messages import Final, Partial, SpeakerUpdate
from parley.sessions.label_votes import kept_numbers, renamed_labels, speakers_changed
from parley.workers.diarization import DiarizationWorker
from parley.workers.threads import in_passing_thread


class SpeakerTrack:
    """A diarized session's speakers: steps fed from its audio, labels on its messages,
    ``speaker_update`` for finals whose speakers changed, and where its turns change."""

    def __init__(
        self,
        worker: DiarizationWorker,
        timing: WordTimingConfig = WordTimingConfig(),
        count: SpeakerCount = SpeakerCount(),
    ):
        config = worker.config
        self._worker = worker
        self._diarizer = worker.new_stream(count)
        self._window = int(config.window_s * SAMPLE_RATE)
        self._step = int(config.step_s * SAMPLE_RATE)
        self._ring = AudioRing(self._window)
        self._since_step = 0
        self._pending: concurrent.futures.Future | None = None
        self._pending_new = 0  # samples the pending step was the first to see
        self._skipped = False  # a step was skipped since the last one started: thin the next
        self._snapshot = TimelineSnapshot((), 0.0, 0)  # as applied to the messages sent
        self._newest = self._snapshot  # the newest finished step's, for cutting at a turn
        self._no_change_in: tuple[TimelineSnapshot, float] | None = None  # checked, none
        self._cuts = ChangeCuts(config.turns)
        self._labels = SpeakerLabels()
        self._unsettled: dict[int, Final] = {}  # segment id → final as last sent
        self._sent: dict[int, Final] = {}  # the same, of the closing relabel's span
        self._outlasted = False  # a final left that span: the relabel would not cover all
        self._closing_s = config.closing_s
        self._timing = timing
        self._names: dict[str, str] = {}  # label → the known speaker its voice matches
        self.clips_offered = 0  # known speakers' clips the client sent, refused ones too

    # ------------------------------------------------------------------ feeding

    async def push(self, samples: np.ndarray) -> list[concurrent.futures.Future]:
        """Keep the audio and start the steps that are due (their futures, in order).

        A step may be skipped while the previous one runs, because the next window still
        covers its audio; once skipping would leave audio that no window sees, this waits
        for the running step instead (back-pressure, as for ASR), so nothing goes unseen.
        The step after a skipped one is thinned (``StreamDiarizer.step``): a session
        whose steps fall behind embeds only what the window before did not cover.
        """
        started = []
        for offset in range(0, len(samples), self._step):
            piece = samples[offset : offset + self._step]
            self._ring.push(piece)
            self._since_step += len(piece)
            if self._since_step < self._step:
                continue
            if self._pending is not None and not self._pending.done():
                if self._since_step + self._step <= self._window:
                    self._skipped = True
                    continue  # the next window still covers this audio
            started.append(await self._step_now())
        return started

    async def catch_up(self, speech_end: float) -> concurrent.futures.Future | None:
        """A step over the latest audio now, so that a final about to be queued, whose
        speech ended at ``speech_end``, is labelled from windows that have heard all of it
        (when sending faster than real time, steps are skipped while the next window still
        covers them). The final waits for it, so it goes before the routine steps queued,
        and takes the place of this session's own step if that has not begun (its window
        covers that step's audio too): under load the catch-up would otherwise wait behind
        every session's routine step twice. None if a step already begun heard the speech
        to its end: the final's messages wait for that step anyway (bench/VARIANTS.md)."""
        if self._since_step == 0:
            return None
        pending = self._pending
        heard = (self._ring.total - self._since_step) / SAMPLE_RATE
        if heard >= speech_end and pending is not None and (pending.running() or pending.done()):
            return None
        if (
            pending is not None
            and self._since_step + self._pending_new <= self._window
            and pending.cancel()
        ):
            self._since_step += self._pending_new  # seen by no step after all
            self._skipped = True
        return await self._step_now(urgent=True)

    async def _step_now(
        self, final: bool = False, urgent: bool = False
    ) -> concurrent.futures.Future:
        if self._pending is not None and not self._pending.done():
            await asyncio.wait([asyncio.wrap_future(self._pending)])
        self._note_newest()
        now = self._ring.total / SAMPLE_RATE
        unseen = self._since_step > 0 or not final
        window = self._ring.latest(self._window) if unseen else np.zeros(0, np.float32)
        future = await self._worker.submit(
            self._diarizer,
            window,
            now - len(window) / SAMPLE_RATE,
            now,
            final=final,
            thin=self._skipped,
            urgent=urgent,
        )
        self._pending_new, self._since_step, self._skipped = self._since_step, 0, False
        self._pending = future
        return future

    async def know(self, name: str, clip: np.ndarray) -> None:
        """A known speaker (``known_speaker``): a voice that matches its 16 kHz clip is
        named from the next step on. The clip is embedded off the event loop."""
        models = self._worker.models
        embedding = await in_passing_thread(embedded_clip, models.embed, clip)
        self._diarizer.known = (*self._diarizer.known, (name, embedding))

    @property
    def known_names(self) -> list[str]:
        """The known speakers' names, in the order given."""
        return [name for name, _ in self._diarizer.known]

    @property
    def names(self) -> dict[str, str]:
        """Label → the known speaker its voice matches, as the labels stand."""
        return self._names

    async def finish(self) -> concurrent.futures.Future:
        """The last step: the audio no step has seen yet, then every label settles."""
        return await self._step_now(final=True)

    # ------------------------------------------------------------------ labelling

    def label_partial(self, partial: Partial) -> Partial:
        """A partial's speaker, if it already has a label (partials never number anyone)."""
        speaker = self._snapshot.speaker_of(partial.start, partial.end)
        return replace(partial, speaker=self._labels.label(speaker, assign=False))

    def label_final(self, final: Final) -> Final:
        """The final with its words placed in the speech the windows heard (their times
        never change after this) and its speakers as they stand; kept, while unsettled,
        for the ``speaker_update`` a later step may send."""
        labelled = self._label(self._placed(final), self._snapshot, self._labels)
        self._keep_sent(labelled)
        if labelled.end > self._snapshot.settled_until:
            self._unsettled[final.segment_id] = labelled
        else:
            self._settle(labelled)
        return labelled

    @property
    def cut_search_s(self) -> float:
        """How far from a turn change the VAD may look for a quieter place to cut."""
        return self._worker.config.turns.cut_search_s

    def turn_change(self, start: float, end: float) -> float | None:
        """Where, in the open segment [start, end], a settled turn passed to someone else
        (read from the newest finished step, which the outbox may not have reached yet),
        by voice: a newcomer's first turn ends the final before its label is shown."""
        self._note_newest()
        checked = self._no_change_in
        if checked is not None and checked[0] is self._newest and checked[1] == start:
            return None  # nothing new to read: audio arrives far more often than steps
        change = self._cuts.read(self._newest.by_voice(), start, end)
        self._no_change_in = (self._newest, start) if change is None else None
        return change

    def changes_in(self, start: float, end: float) -> list[float]:
        """Where the segment [start, end], just closed, changed speakers: the changes
        found too late to cut it there (``TurnConfig.max_cut_age_s``)."""
        return self._cuts.uncut_between(start, end)

    def _note_newest(self) -> None:
        step = self._pending
        if step is not None and step.done() and not step.cancelled() and step.exception() is None:
            self._newest = step.result()

    def _placed(self, final: Final) -> Final:
        speech = self._snapshot.speech(final.start, final.end)
        spans = fit_to_speech([(w.start, w.end) for w in final.words], speech, self._timing)
        words = [replace(w, start=a, end=b) for w, (a, b) in zip(final.words, spans)]
        return replace(final, words=words)

    def _keep_sent(self, final: Final) -> None:
        if self._closing_s <= 0:
            return
        self._sent[final.segment_id] = final  # in the order sent: the oldest first
        horizon = final.end - self._closing_s
        while (oldest := next(iter(self._sent.values()))).end < horizon:
            del self._sent[oldest.segment_id]
            self._outlasted = True

    def _label(
        self,
        final: Final,
        snapshot: TimelineSnapshot,
        labels: SpeakerLabels,
        heard: list[int | None] | None = None,
    ) -> Final:
        """``final`` labelled from ``snapshot`` (``heard``: its words' speakers there, where
        already read)."""
        spans = [(w.start, w.end) for w in final.words]
        if heard is None:
            heard = [snapshot.speaker_of(a, b) for a, b in spans]
        # A change left uncut (found too late) parts the words as a cut would have: no
        # short run joins a neighbour across it.
        speakers: list[int | None] = []
        for part in parts_at(spans, self._cuts.uncut_between(final.start, final.end)):
            speakers += smooth_labels(spans[part], heard[part], self._worker.config.turns)
        words = [replace(w, speaker=labels.label(s)) for w, s in zip(final.words, speakers)]
        spoken: dict[str | None, float] = {}
        for w in words:
            spoken[w.speaker] = spoken.get(w.speaker, 0.0) + max(w.end - w.start, 1e-3)
        speaker = (
            max(spoken, key=lambda label: spoken[label])
            if spoken
            else labels.label(snapshot.speaker_of(final.start, final.end))
        )
        return replace(final, speaker=speaker, words=words)

    def _settle(self, final: Final) -> None:
        self._labels.settle([final.speaker] + [w.speaker for w in final.words])

    def apply(self, snapshot: TimelineSnapshot) -> list[SpeakerUpdate]:
        """Take a new snapshot; updates for sent finals whose speakers changed (every final
        the closing timeline covers, when the snapshot brings one)."""
        self._snapshot = snapshot
        self._labels.follow(snapshot.aliases)
        updates: dict[int, SpeakerUpdate] = {}
        for segment_id, sent in list(self._unsettled.items()):
            relabelled = self._label(sent, snapshot, self._labels)
            if speakers_changed(sent, relabelled):
                updates[segment_id] = self._update(relabelled)
                self._unsettled[segment_id] = relabelled
            if sent.end <= snapshot.settled_until:
                self._settle(relabelled)
                del self._unsettled[segment_id]  # its labels cannot change any more
        if snapshot.closing is not None and snapshot.closing.turns and not self._outlasted:
            updates.update(self._relabel_all(snapshot.closing, snapshot.taken_over))
            if snapshot.taken_over is None:  # the end: the clustered voices are named there
                return list(updates.values())
        self._names = _named_labels(snapshot.names, self._labels)  # as the labels now stand
        return list(updates.values())

    def _relabel_all(
        self, closing: TimelineSnapshot, taken_over: Mapping[int, int] | None
    ) -> dict[int, SpeakerUpdate]:
        """The finals labelled from the closing timeline: the updates for those that
        changed (a final that timeline gives nobody keeps its speakers, under the labels
        their words took in the other finals: ``renamed_labels``). At a
        checkpoint a final still unsettled is left to the live snapshots, each clustered
        speaker keeps the number the finals mostly gave its words where it can
        (``kept_numbers``), and the live speakers that take its speakers over keep their
        labels from then on. At the end (``taken_over`` None) every final is settled,
        those that end past the stream's last frame too, and the speakers are numbered
        S1…Sn afresh, in order of appearance."""
        turns = TurnsByTime(closing)  # each final reads its own stretch: on the event loop
        if taken_over is None:
            # The end: nothing will settle the rest, and a live label left on one would be
            # numbered otherwise than the finals relabelled around it.
            self._unsettled.clear()
        settled = sorted(
            (f for f in self._sent.values() if f.segment_id not in self._unsettled),
            key=lambda final: final.start,
        )
        views = [turns.around(final.start, final.end) for final in settled]
        heard = [  # each word's speaker there, read once
            [view.speaker_of(w.start, w.end) for w in final.words]
            for final, view in zip(settled, views)
        ]
        labels = SpeakerLabels()
        if taken_over is not None:
            labels = SpeakerLabels.numbered(kept_numbers(settled, heard))
        relabelled = [
            self._label(sent, view, labels, speakers)
            for sent, view, speakers in zip(settled, views, heard)
        ]
        renamed = renamed_labels(
            [(a, b) for a, b in zip(settled, relabelled) if b.speaker is not None]
        )
        updates = {}
        for sent, final in zip(settled, relabelled):
            if final.speaker is None:  # heard by no window the clustering counted
                final = replace(
                    sent,
                    speaker=renamed.get(sent.speaker, sent.speaker),
                    words=[
                        replace(w, speaker=renamed.get(w.speaker, w.speaker)) for w in sent.words
                    ],
                )
            if speakers_changed(sent, final):
                updates[sent.segment_id] = self._update(final)
        if taken_over is None:  # the end: the names are the clustered voices' from now on
            self._names = _named_labels(closing.names, labels)
        self._labels = labels.taken_over(taken_over or {})
        return updates

    def _update(self, final: Final) -> SpeakerUpdate:
        if final.segment_id in self._sent:  # kept in its place: the oldest first
            self._sent[final.segment_id] = final
        return SpeakerUpdate(final.segment_id, final.speaker, final.words)


def _named_labels(names: Mapping[int, str], labels: SpeakerLabels) -> dict[str, str]:
    """Label → name, of the speakers ``names`` names that ``labels`` has a label for."""
    named = ((labels.label(speaker, assign=False), name) for speaker, name in names.items())
    return {label: name for label, name in named if label is not None}
