"""The row decoder: transformers' numbers, free rollback, rows that move, flat memory.

The CUDA-graph replay itself needs a GPU (bench/gpu_check.sh runs it there); what can be
checked here is that the forward it captures matches the eager one, has no
data-dependent Python (it traces as one graph), and that rows keep their sequences
whatever happens to the rows around them.
"""

import pytest
import torch

from audio_fixtures import SAMPLE_WAV, read_wav
from parley.models.row_decoder import RowDecoder

CLOSE = {"rtol": 1e-4, "atol": 1e-4}


@pytest.fixture(scope="module")
def encoded(tiny_engine):
    audio = read_wav(SAMPLE_WAV)[int(6.4 * 16000) : int(21.0 * 16000)]
    with torch.inference_mode():
        return tiny_engine.model.model.encoder(tiny_engine.features(audio)).last_hidden_state


@pytest.fixture
def rows(tiny_engine):
    return RowDecoder(tiny_engine.model.model.decoder, capacity=4, max_width=16)


def test_a_row_computes_what_transformers_decoder_computes(tiny_engine, rows, encoded):
    ids = tiny_engine.sot_sequence("en") + [400, 500, 600]
    with torch.inference_mode():
        expected = tiny_engine.model.model.decoder(
            input_ids=torch.tensor([ids]), encoder_hidden_states=encoded
        ).last_hidden_state[0]
        (row,) = rows.add(encoded)
        got = torch.cat([row.feed(ids[:3]), row.feed(ids[3:4]), row.feed(ids[4:])])
    torch.testing.assert_close(got, expected, **CLOSE)


def test_rollback_moves_the_position_and_overwrites(tiny_engine, rows, encoded):
    """Hidden states after a rollback equal those of a decode that never took the detour."""
    prompt = tiny_engine.sot_sequence("en")
    with torch.inference_mode():
        reference, row = rows.add(encoded.repeat(2, 1, 1))
        reference.feed(prompt)
        expected = reference.feed([400, 500, 600])
        row.feed(prompt)
        row.feed([11, 12, 13, 14, 15, 16])  # a rejected draft
        row.truncate(len(prompt))
        got = row.feed([400, 500, 600])
    assert row.length == len(prompt) + 3
    torch.testing.assert_close(got, expected, **CLOSE)


def test_rows_keep_their_sequences_when_others_leave_or_pause(tiny_engine, rows, encoded):
    """Releasing a row moves the last one into its place, stepping a subset moves rows to
    the front: each row's next hidden state is what a row left alone computes."""
    prompt = tiny_engine.sot_sequence("en")
    with torch.inference_mode():
        alone = RowDecoder(tiny_engine.model.model.decoder, capacity=1, max_width=16)
        (single,) = alone.add(encoded)
        single.feed(prompt + [400])
        expected = single.feed([500])[0]
        a, b, c, d = rows.add(encoded.repeat(4, 1, 1))
        for row in (a, b, c, d):
            row.feed(prompt)
        rows.forward([a, b, c, d], [[400], [11], [400], [400]])
        rows.release(a)  # d moves into a's slot
        assert d.slot == 0 and not a.active
        got = rows.forward([d, c], [[500], [500]])  # b pauses: c and d move to the front
        assert {d.slot, c.slot} == {0, 1} and b.slot == 2
        with pytest.raises(RuntimeError, match="released"):
            a.feed([1])
    for hidden in got:
        torch.testing.assert_close(hidden[0], expected, **CLOSE)


def test_memory_stays_flat_and_limits_are_errors(tiny_engine, rows, encoded):
    """Buffers are allocated once: many decodes later they are the same tensors."""
    buffers = [rows._self_k.data_ptr(), rows._cross_k.data_ptr()]
    with torch.inference_mode():
        for _ in range(3):
            (row,) = rows.add(encoded)
            row.feed(list(range(1000, 1000 + rows.max_positions)))  # the longest sequence
            with pytest.raises(ValueError, match="at most"):
                row.feed([1])
            rows.release(row)
        rows.add(encoded.repeat(4, 1, 1))
        with pytest.raises(RuntimeError, match="holds 4 rows"):
            rows.add(encoded)
    assert [rows._self_k.data_ptr(), rows._cross_k.data_ptr()] == buffers


def test_the_captured_forward_is_one_graph(tiny_engine, rows, encoded):
    """What CUDA graphs capture must have no data-dependent Python: it traces whole.

    ``fullgraph=True`` makes any graph break (``.item()``, a branch on a tensor) an
    error, which is what would break capture on a GPU. The traced forward, run over
    two rows at a padded width and every slot as a replay does, gives the eager numbers.
    """
    traced = torch.compile(rows._forward, backend="eager", fullgraph=True)
    with torch.inference_mode():
        first, second = rows.add(encoded.repeat(2, 1, 1))
        first.feed(tiny_engine.sot_sequence("en"))
        second.feed(tiny_engine.sot_sequence("en") + [400])
        starts = torch.tensor([[first.length], [second.length]])
        ids = torch.tensor([[400, 500, 500, 500], [500, 500, 500, 500]])  # padded to 4
        padded, _ = traced(ids, starts + torch.arange(4), 0, 2, rows._slots)
        exact = rows.forward([first, second], [[400, 500], [500]])
    torch.testing.assert_close(padded[0, :2], exact[0], **CLOSE)
    torch.testing.assert_close(padded[1, :1], exact[1], **CLOSE)


def test_a_short_window_row_computes_what_transformers_decoder_computes(tiny_engine, rows, encoded):
    """A row over fewer encoder positions reads only its own, beside a whole window's row,
    in one pass and after rows move: what transformers' decoder computes over them."""
    short = encoded[:, :400]
    ids = tiny_engine.sot_sequence("en") + [400, 500, 600]
    with torch.inference_mode():
        expected = {
            n: tiny_engine.model.model.decoder(
                input_ids=torch.tensor([ids]), encoder_hidden_states=hidden
            ).last_hidden_state[0]
            for n, hidden in ((400, short), (1500, encoded))
        }
        first, whole = rows.add(short.repeat(2, 1, 1))[0], rows.add(encoded)[0]
        short_again = rows.add(short)[0]
        got = rows.forward([first, whole, short_again], [ids, ids, ids])
        torch.testing.assert_close(got[0], expected[400], **CLOSE)
        torch.testing.assert_close(got[1], expected[1500], **CLOSE)
        torch.testing.assert_close(got[2], expected[400], **CLOSE)
        rows.release(first)  # the last row (over 400 positions) moves into its slot
        (late,) = rows.add(encoded)  # a whole window where a short row's buffers were
        more = rows.forward([late], [ids])[0]
    torch.testing.assert_close(more, expected[1500], **CLOSE)
    weights = rows.cross_attention(short_again, ids, [(1, 0)])
    assert weights.shape[-1] == 400


def test_with_graphs_a_pass_reads_its_rows_from_the_first_slot(tiny_engine, rows, encoded):
    """Captured graphs read rows from slot 0 on: a pass of rows elsewhere is moved there
    first (a row drafting alone from slot 1 ran eagerly on the H200), and each row
    still reads its own sequence. Without graphs rows stay where they are."""
    ids = tiny_engine.sot_sequence("en") + [400, 500]
    with torch.inference_mode():
        first, second, third = rows.add(encoded.repeat(3, 1, 1))
        for row in (first, second, third):
            row.feed(ids)
        expected = rows.forward([third], [[600]])[0]
        third.truncate(len(ids))
        assert third.slot == 2  # eager: no move
        passes = []
        run = rows._run

        def recorded(pass_rows, feeds, width):  # which slots a pass reads, then eagerly
            passes.append([r.slot for r in pass_rows])
            graphs, rows._graphs = rows._graphs, {}
            try:
                return run(pass_rows, feeds, width)
            finally:
                rows._graphs = graphs

        rows._run = recorded  # the replay itself needs a GPU; which slots it reads does not
        rows._graphs = {(1, 1): None}
        try:
            got = rows.forward([third], [[600]])[0]
            both = rows.forward([second, first], [[600], [600]])
        finally:
            rows._graphs = {}
    assert passes == [[0], [0, 1]]
    torch.testing.assert_close(got, expected, **CLOSE)
    torch.testing.assert_close(both[0], expected, **CLOSE)
    torch.testing.assert_close(both[1], expected, **CLOSE)
