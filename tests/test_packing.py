"""Packing a recording's segments into decoder windows and back (core/packing.py), and
clustering a whole recording's voices (core/recording_speakers.py): pure, property-tested."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse.linalg
from hypothesis import given, settings
from hypothesis import strategies as st

from parley.core import spectral_graph
from parley.core.packing import Piece, Window, pack
from parley.core.recording_speakers import RecordingClustering, cluster
from parley.core.speaker_count import SpeakerCount
from parley.core.speakers import relative_similarity
from parley.core.spectral_graph import unit_rows
from parley.core.words import TimedWord


@st.composite
def recordings(draw):
    """Consecutive, non-overlapping speech segments (start, length, gap)."""
    lengths = draw(st.lists(st.floats(0.2, 15.0), min_size=1, max_size=30))
    gaps = draw(st.lists(st.floats(0.3, 5.0), min_size=len(lengths), max_size=len(lengths)))
    pieces, t = [], 0.0
    for i, (length, gap) in enumerate(zip(lengths, gaps)):
        t += gap
        pieces.append(Piece(i, t, t + length, ((0.0, length),)))
        t += length
    return pieces


@given(recordings(), st.floats(15.0, 29.0), st.sampled_from([0.0, 0.5, 1.0]))
def test_windows_keep_every_piece_in_order_within_the_limit(pieces, max_s, gap_s):
    windows = pack(pieces, max_s, gap_s)
    assert [p for w in windows for p in w.pieces] == pieces
    for window in windows:
        assert window.seconds <= max_s + 1e-9 or len(window.pieces) == 1
        assert window.offsets[0] == 0.0
        pairs = zip(window.pieces, window.pieces[1:])
        for (a, b), (piece, after) in zip(zip(window.offsets, window.offsets[1:]), pairs):
            pause = min(after.start - piece.end, gap_s)  # the recording's, up to gap_s
            assert abs(b - a - piece.seconds - pause) < 1e-9


def test_a_window_holds_its_pieces_with_their_pauses_and_words_in_them_go_back():
    """Each piece's samples at its offset, and between two pieces the recording's pause,
    up to the gap (2.5 s here kept as its first and last 0.5 s, 0.4 s as it was; touching
    pieces touch). A word the aligner put in the pause after a piece (a sentence's last
    word, late) goes back to that piece."""
    recording = np.arange(1, 8 * 16_000 + 1, dtype=np.float32)
    pieces = [
        Piece(0, 1.0, 2.5, ((0.0, 1.5),)),
        Piece(1, 5.0, 6.0, ((0.0, 1.0),)),
        Piece(2, 6.4, 7.0, ((0.0, 0.6),)),
        Piece(3, 7.0, 7.5, ((0.0, 0.5),)),
    ]
    (window,) = pack(pieces, 29.0, 1.0)
    assert np.allclose(window.offsets, (0.0, 2.5, 3.9, 4.5)) and window.seconds == 5.0
    audio = window.audio(recording)
    assert len(audio) == 5.0 * 16_000
    assert np.array_equal(audio[:32_000], recording[16_000:48_000])
    assert np.array_equal(audio[32_000:56_000], recording[72_000:96_000])
    assert np.array_equal(audio[56_000:], recording[96_000:120_000])
    late = TimedWord("today.", 1.4, 1.9, 0.9)  # middle in the silence after piece 0
    first = TimedWord("First,", 2.6, 2.9, 0.9)
    placed = window.place([late, first])
    assert [[w.word for w in p] for p in placed] == [["today."], ["First,"], [], []]
    assert placed[0][0].start == 2.4 and placed[0][0].end == 2.5  # clamped into piece 0
    assert abs(placed[1][0].start - 5.1) < 1e-9


@given(recordings(), st.data())
def test_a_word_goes_back_to_its_piece_at_its_own_time(pieces, data):
    (window, *_) = pack(pieces, 29.0)
    index = data.draw(st.integers(0, len(window.pieces) - 1))
    piece, offset = window.pieces[index], window.offsets[index]
    start = data.draw(st.floats(0.0, piece.seconds * 0.9))
    end = data.draw(st.floats(start, piece.seconds))
    word = TimedWord("w", offset + start, offset + end, 0.9)
    placed = window.place([word])
    assert [len(p) for p in placed] == [int(i == index) for i in range(len(window.pieces))]
    (back,) = placed[index]
    assert abs(back.start - (piece.start + start)) < 1e-6
    assert piece.start <= back.start <= back.end <= piece.end + 1e-9


def test_the_pieces_a_decoder_skipped_are_decoded_again_each_alone():
    """A piece with fewer words than one per 2 s of its speech was skipped (an early stop,
    or a jump to the window's last sentence); its words in the window are left out."""
    pieces = [Piece(i, 10.0 * i, 10.0 * i + 8.0, ((0.5, 7.5),)) for i in range(3)]
    (window,) = pack(pieces, 29.0)
    said = [TimedWord(w, t, t + 0.4, 1.0) for w, t in zip("abc", (1.0, 2.0, 3.0, 4.0))]
    said += [TimedWord("d", 9.0, 9.4, 1.0)] + [  # one word in piece 1's 7 s of speech
        TimedWord(w, 17.0 + k / 2, 17.3 + k / 2, 1.0) for k, w in enumerate("efghij")
    ]
    assert window.unheard(said) == (pieces[0], pieces[1])  # 3 words in 7 s: skipped too
    said.insert(3, TimedWord("c2", 4.0, 4.4, 1.0))
    assert window.unheard(said) == (pieces[1],)
    kept = ["a", "b", "c", "c2", *"efghij"]
    assert [w.word for w in window.words_outside(said, (pieces[1],))] == kept
    early = said[:5]  # the decoder stopped in piece 1: pieces 1 and 2 again
    assert window.unheard(early) == (pieces[1], pieces[2])
    assert window.unheard([]) == ()  # silence, not a skip
    short = Piece(3, 30.0, 31.0, ((0.2, 0.9),))  # a word, most likely placed beside it
    (packed,) = pack([*pieces[:2], short], 29.0)
    heard = said[:4] + [TimedWord("k", 9.0 + k, 9.4 + k, 1.0) for k in range(4)]
    assert packed.unheard(heard) == ()
    alone = Window((pieces[0],), (0.0,))
    assert alone.unheard(said[:1]) == ()  # decoded alone already


def voices(counts: list[int], spread: float = 0.15, seed: int = 0) -> np.ndarray:
    """Embeddings of ``len(counts)`` voices, ``counts[k]`` of voice k, in turns."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((len(counts), 64))
    rows = [
        centres[k] + spread * np.linalg.norm(centres[k]) / 8 * rng.standard_normal(64)
        for k, n in enumerate(counts)
        for _ in range(n)
    ]
    return np.array(rows)


@pytest.mark.parametrize("speakers", [1, 2, 3, 5])
def test_clustering_finds_each_voice(speakers):
    embeddings = voices([12] * speakers)
    labels = cluster(embeddings, np.full(len(embeddings), 2.0), RecordingClustering())
    truth = np.repeat(np.arange(speakers), 12)
    assert len(set(labels)) == speakers
    assert all(len(set(labels[truth == k])) == 1 for k in range(speakers))


def test_a_given_count_is_kept_and_bounds_clamp():
    embeddings = voices([12, 12, 12])
    weights = np.full(len(embeddings), 2.0)
    config = RecordingClustering()
    assert len(set(cluster(embeddings, weights, config, SpeakerCount(exactly=2)))) == 2
    assert len(set(cluster(embeddings, weights, config, SpeakerCount(at_most=2)))) == 2
    assert len(set(cluster(embeddings[:12], weights[:12], config, SpeakerCount(at_least=2)))) == 2


def test_a_voice_heard_too_little_joins_the_nearest():
    embeddings = voices([20, 20, 1])
    labels = cluster(embeddings, np.full(len(embeddings), 2.0), RecordingClustering())
    assert len(set(labels)) == 2


def two_groups_of(alike: float, per_group: int = 15, seed: int = 1) -> np.ndarray:
    """Two tight groups of embeddings whose centres are ``alike`` (cosine)."""
    rng = np.random.default_rng(seed)
    centre, away = np.linalg.qr(rng.standard_normal((64, 2)))[0].T
    half = np.arccos(alike) / 2
    rows = [
        np.cos(half) * centre + side * np.sin(half) * away + 0.1 * rng.standard_normal(64) / 8
        for side in (1, -1)
        for _ in range(per_group)
    ]
    return np.array(rows)


def test_a_voice_whose_windows_drift_is_one_speaker_and_two_close_voices_two():
    weights = np.full(30, 2.0)
    # The graph alone sees two groups either way; only their likeness tells them apart.
    assert len(set(cluster(two_groups_of(0.98), weights, RecordingClustering()))) == 1
    assert len(set(cluster(two_groups_of(0.83), weights, RecordingClustering()))) == 2
    drifting = two_groups_of(0.98)
    assert len(set(cluster(drifting, weights, RecordingClustering(same_voice=1.5)))) == 2


def test_two_clusters_that_took_turns_but_never_shared_a_window_join_sooner():
    """Clusters between ``apart_voice`` and ``same_voice`` alike are one voice when they
    were heard in windows next to each other and never as two local speakers of one
    window (one voice drifting); heard together, or never near, they stay two."""
    halves = two_groups_of(0.9)
    weights = np.full(30, 2.0)
    alike = relative_similarity(
        unit_rows(halves[:15]), unit_rows(halves[15:]), RecordingClustering().voice_similarity
    )
    config = RecordingClustering(same_voice=alike + 0.01, apart_voice=alike - 0.01)
    one_after_the_other = np.arange(30)
    side_by_side = np.tile(np.arange(15), 2)
    far_apart = np.concatenate([np.arange(15), np.arange(100, 115)])
    count = SpeakerCount()
    assert len(set(cluster(halves, weights, config, count, one_after_the_other))) == 1
    assert len(set(cluster(halves, weights, config, count, side_by_side))) == 2
    assert len(set(cluster(halves, weights, config, count, far_apart))) == 2
    assert len(set(cluster(halves, weights, config, count))) == 2  # windows unknown


def test_a_long_recording_is_clustered_sparsely_as_a_short_one_densely(monkeypatch):
    """Past a few hundred embeddings the graph stays sparse and the eigensolver works
    on it (a two-hour stream's windows would need gigabytes as dense matrices): the
    same eigenvalues and the same speakers as the dense solver's."""
    embeddings = voices([300, 250, 200, 150], spread=0.6, seed=3)
    weights = np.full(len(embeddings), 2.0)
    unit = spectral_graph.unit_rows(embeddings)
    laplacian = spectral_graph.pruned_laplacian(unit, 18)
    assert spectral_graph.DENSE_UP_TO < len(embeddings)  # the sparse solver's
    values, _ = spectral_graph.smallest_eigenpairs(laplacian, 9)
    dense = scipy.linalg.eigh(laplacian.toarray(), eigvals_only=True, subset_by_index=[0, 8])
    np.testing.assert_allclose(values, dense, atol=1e-8)

    def unconverged(*args, **kwargs):
        raise scipy.sparse.linalg.ArpackNoConvergence("not converged", [], [])

    with monkeypatch.context() as patch:  # the dense solver takes over
        patch.setattr(scipy.sparse.linalg, "eigsh", unconverged)
        fallback, _ = spectral_graph.smallest_eigenpairs(laplacian, 9)
    np.testing.assert_allclose(fallback, dense, atol=1e-8)
    sparse_labels = cluster(embeddings, weights, RecordingClustering())
    monkeypatch.setattr(spectral_graph, "DENSE_UP_TO", len(embeddings))
    dense_labels = cluster(embeddings, weights, RecordingClustering())
    assert sparse_labels.tolist() == dense_labels.tolist()
    assert len(set(sparse_labels)) == 4


def test_the_graph_is_the_same_whatever_rows_are_pruned_at_once(monkeypatch):
    """Rows of similarities are pruned a block at a time, to bound the clustering's memory:
    each row keeps the same neighbours as with all rows at once, its similarities to them
    the same but for the matrix product's last bits."""
    unit = spectral_graph.unit_rows(voices([300, 250, 200, 150], spread=0.6, seed=3))
    assert spectral_graph.BLOCK_ROWS < len(unit)
    blocked = spectral_graph.pruned_laplacian(unit, 18).toarray()
    monkeypatch.setattr(spectral_graph, "BLOCK_ROWS", len(unit))
    whole = spectral_graph.pruned_laplacian(unit, 18).toarray()
    assert np.array_equal(blocked != 0, whole != 0)
    np.testing.assert_allclose(blocked, whole, rtol=0, atol=1e-12)


def test_speaker_counts_are_checked():
    with pytest.raises(ValueError):
        SpeakerCount(at_least=3, at_most=2)
    with pytest.raises(ValueError):
        SpeakerCount(exactly=0)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 40), st.integers(0, 2**32 - 1), st.booleans())
def test_the_vector_dtw_takes_transformers_path(rows, cols, seed, ties):
    """core/dtw.py against transformers' own DTW (the reference): the same path, ties
    (rounded costs) included."""
    from transformers.models.whisper.generation_whisper import _dynamic_time_warping

    from parley.core.dtw import dynamic_time_warping

    matrix = -np.random.default_rng(seed).random((rows, cols))
    if ties:
        matrix = np.round(matrix, 1)
    expected = _dynamic_time_warping(matrix)
    assert all(np.array_equal(a, b) for a, b in zip(dynamic_time_warping(matrix), expected))


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([1, 3, 5, 7, 9]),
    st.tuples(st.integers(1, 3), st.integers(1, 6), st.integers(1, 40)),
    st.integers(0, 2**32 - 1),
    st.booleans(),
)
def test_the_sorting_network_median_is_transformers_median(width, shape, seed, ties):
    """models/median_filter.py against transformers' own filter (the reference): the same
    values, ties (rounded weights) and windows wider than the frames included."""
    import torch
    from transformers.models.whisper.generation_whisper import _median_filter

    from parley.models.median_filter import median_filter

    weights = torch.from_numpy(np.random.default_rng(seed).standard_normal(shape, np.float32))
    if ties:
        weights = torch.round(weights)
    assert torch.equal(median_filter(weights, width), _median_filter(weights, width))


@pytest.mark.parametrize("size", range(1, 10))
def test_the_sorting_network_sorts_every_input(size):
    """By the 0-1 principle, a comparator network that sorts every input of 0s and 1s
    sorts every input."""
    import itertools

    from parley.models.median_filter import sorting_network

    for bits in itertools.product((0, 1), repeat=size):
        values = list(bits)
        for a, b in sorting_network(size):
            values[a], values[b] = min(values[a], values[b]), max(values[a], values[b])
        assert values == sorted(values)
