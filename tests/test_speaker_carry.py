"""Thinned diarization steps (core.speaker_carry): a local speaker continuing one of the
window before keeps its link unembedded, and only in a step thinned under load; a
final's catch-up step goes first and takes the place of a step not yet begun."""

import asyncio
import concurrent.futures

import numpy as np

from parley.core.speaker_carry import LinkedWindow, carried
from parley.core.stream_diarizer import CLOSING_STEP_S, DiarizationConfig, StreamDiarizer
from parley.sessions.speaker_track import SpeakerTrack
from parley.workers.diarization import DiarizationWorker
from test_diarization_worker import CountingModels


def linked(active, speakers, unembedded, start=0.0):
    active = np.array(active, dtype=bool)
    return LinkedWindow(start, active, speakers, unembedded, np.ones((active.shape[1], 4)))


def test_a_continuing_linked_speaker_is_carried_until_heard_long_enough_unembedded():
    """Shifted by two frames, the same activity matches; its seconds alone unembedded
    decide; an unlinked predecessor or a new voice is never carried."""
    before = linked([[1, 0]] * 6 + [[0, 1]] * 4, (3, None), (0.2, 0.0))
    now = np.array([[1, 0]] * 4 + [[0, 1]] * 4 + [[0, 1]] * 2, dtype=bool)
    fresh = np.array([0.0, 0.2])
    assert carried(before, 0.2, now, fresh, 0.1, 1.0) == {0: 0}  # local 1's was unlinked
    assert carried(before, 0.2, now, np.array([0.9, 0.0]), 0.1, 1.0) == {}  # due again
    assert carried(before, 0.2, now, fresh, 0.1, 0.0) == {}  # never thinned
    newcomer = np.array([[0, 0]] * 8 + [[1, 0]] * 2, dtype=bool)  # nothing it continues
    assert carried(before, 0.2, newcomer, fresh, 0.1, 1.0) == {}
    assert carried(None, 0.2, now, fresh, 0.1, 1.0) == {}


class OneVoiceModels(CountingModels):
    """One local speaker throughout, counting its embeddings."""

    def __init__(self):
        super().__init__()
        self.embedded = 0

    def embed(self, window, masks):
        self.embedded += int(masks.any(axis=1).sum())
        return super().embed(window, masks)


def test_thinned_steps_embed_less_and_label_the_same_and_keep_embedded_windows():
    """Thinned, a steady voice is embedded about half as often, with the same labels;
    every window kept for the closing relabel was embedded; unthinned, every step is."""
    audio = np.zeros(40 * 16000, np.float32)
    runs = {}
    for thin in (False, True):
        models = OneVoiceModels()
        diarizer = StreamDiarizer(models, DiarizationConfig(closing_s=60.0))
        for window, start, now in diarizer.windows(audio):
            snapshot = diarizer.step(window, start, now, thin=thin)
        runs[thin] = (models.embedded, snapshot, diarizer.kept_windows)
    (full, plain, _), (fewer, thinned, kept) = runs[False], runs[True]
    assert full == len(audio) // 8000 and fewer <= 0.6 * full
    assert thinned.turns == plain.turns and thinned.speaker_count == 1
    assert all(not np.isnan(w.local.embeddings).any() for w in kept)
    starts = [w.start for w in kept]
    assert all(b - a >= CLOSING_STEP_S for a, b in zip(starts, starts[1:]))


class HeldWorker(DiarizationWorker):
    """Steps are never run: each submit is recorded with its ``thin`` and held open."""

    def __init__(self):
        super().__init__(CountingModels(), DiarizationConfig())
        self.submitted: list[tuple[bool, concurrent.futures.Future]] = []
        self.urgent: list[bool] = []

    async def submit(
        self, diarizer, window, window_start, now, final=False, thin=False, urgent=False
    ):
        future: concurrent.futures.Future = concurrent.futures.Future()
        self.submitted.append((thin, future))
        self.urgent.append(urgent)
        return future


async def test_the_step_after_a_skipped_one_is_thinned_and_the_next_is_not():
    """While a step runs, due steps are skipped; the one started after them is thinned,
    and one that follows a step finished in time is not."""
    worker = HeldWorker()
    track = SpeakerTrack(worker)
    half_second = np.zeros(8000, np.float32)
    await track.push(half_second)
    await track.push(half_second)  # due while the first runs: skipped
    worker.submitted[0][1].set_result(None)
    await track.push(half_second)
    worker.submitted[1][1].set_result(None)
    await track.push(half_second)
    assert [thin for thin, _ in worker.submitted] == [False, True, False]


async def test_a_finals_catch_up_takes_the_place_of_a_step_not_yet_begun():
    """A final's catch-up step goes first (urgent); the session's own step still queued is
    cancelled, its audio left to the catch-up (thinned, as after a skip); one already
    running is waited for."""
    worker = HeldWorker()
    track = SpeakerTrack(worker)
    half_second = np.zeros(8000, np.float32)
    await track.push(half_second)
    await track.push(np.zeros(1600, np.float32))
    await track.catch_up(speech_end=0.4)  # heard by the queued step: it is replaced anyway
    queued, catch_up = worker.submitted[0][1], worker.submitted[1][1]
    assert queued.cancelled() and not catch_up.done()
    assert [thin for thin, _ in worker.submitted] == [False, True] and worker.urgent == [
        False,
        True,
    ]

    assert catch_up.set_running_or_notify_cancel()  # now running: the next catch-up waits
    await track.push(np.zeros(1600, np.float32))
    waiting = asyncio.ensure_future(track.catch_up(speech_end=0.8))
    await asyncio.sleep(0.05)
    assert not waiting.done() and len(worker.submitted) == 2
    catch_up.set_result(None)
    await waiting
    assert worker.urgent == [False, True, True] and not catch_up.cancelled()


async def test_no_catch_up_when_a_begun_step_heard_the_speech_to_its_end():
    """A final whose speech ended inside the window of a step already begun (or done) is
    labelled from that step, which its session's messages wait for anyway: no catch-up.
    Speech that went on past that window still gets one."""
    worker = HeldWorker()
    track = SpeakerTrack(worker)
    await track.push(np.zeros(8000, np.float32))  # a step over 0 to 0.5 s
    await track.push(np.zeros(1600, np.float32))  # and 0.1 s of silence since
    running = worker.submitted[0][1]
    assert running.set_running_or_notify_cancel()
    assert await track.catch_up(speech_end=0.45) is None
    running.set_result(None)
    assert await track.catch_up(speech_end=0.45) is None  # done: the same
    assert len(worker.submitted) == 1
    assert await track.catch_up(speech_end=0.55) is not None
    assert worker.urgent == [False, True]
