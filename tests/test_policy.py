"""The scheduler's pure parts: cost models learnt from timings, and the choices made from them."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parley.core.costs import Acceptance, DecayingRate, EncoderCosts, StepCostModel
from parley.core.policy import (
    AsrThreads,
    PartialPacing,
    draft_budgets,
    encoder_batch_size,
    finish_decoding_first,
    remaining_steps,
)
from parley.workers.scheduler import STEP_COST_PRIOR

probabilities = st.floats(min_value=0.05, max_value=0.98)
costs = st.tuples(st.floats(1e-3, 0.05), st.floats(0.0, 0.01), st.floats(1e-5, 5e-3))


def linear(c0, c_row, c_token):
    return lambda rows, tokens: c0 + c_row * rows + c_token * tokens


def expected_rate(acceptance, budgets, cost) -> float:
    """Expected tokens per second of a step under the geometric acceptance model."""
    gained = sum(
        1 + sum(a**k for k in range(1, b + 1)) if a else 1 for a, b in zip(acceptance, budgets)
    )
    return gained / cost(len(budgets), len(budgets) + sum(budgets))


@given(st.lists(st.one_of(st.none(), probabilities), min_size=1, max_size=3), costs)
@settings(max_examples=60, deadline=None)
def test_draft_budgets_are_the_best_allocation(acceptance, coefficients):
    """On small cases, no other allocation of draft tokens has a better expected rate."""
    cost = linear(*coefficients)
    budgets = draft_budgets(acceptance, cost, max_draft=4)
    assert all(b == 0 for a, b in zip(acceptance, budgets) if a is None)
    choices = [range(5) if a is not None else [0] for a in acceptance]
    best = max(expected_rate(acceptance, b, cost) for b in itertools.product(*choices))
    assert expected_rate(acceptance, budgets, cost) >= best * (1 - 1e-9)


@given(probabilities, costs)
@settings(max_examples=60, deadline=None)
def test_more_rows_never_get_longer_drafts(acceptance, coefficients):
    """Speculation at low load, plain batches at high load: a row's budget only shrinks
    as rows with the same acceptance are added."""
    cost = linear(*coefficients)
    budgets = [draft_budgets([acceptance] * rows, cost, 15)[0] for rows in (1, 2, 4, 8, 16)]
    assert budgets == sorted(budgets, reverse=True)


def test_free_positions_get_full_drafts_and_dear_ones_none():
    assert draft_budgets([0.9, None], linear(0.01, 0.0, 0.0), 15) == [15, 0]
    assert draft_budgets([0.9, 0.9], linear(0.01, 0.0, 1.0), 15) == [0, 0]


def test_encoder_batches_only_where_they_finish_clips_sooner():
    cpu = {1: 0.25, 2: 0.52, 4: 1.1}  # a compute-bound encoder: a batch costs its parts
    gpu = {1: 0.011, 2: 0.012, 4: 0.014, 8: 0.02}
    assert [encoder_batch_size(n, cpu) for n in (0, 1, 2, 4, 9)] == [0, 1, 1, 1, 1]
    assert [encoder_batch_size(n, gpu) for n in (1, 2, 3, 4, 8, 9)] == [1, 2, 2, 4, 8, 4]
    assert encoder_batch_size(5, {}) == 1  # nothing timed yet: one at a time


def test_finals_almost_done_finish_before_a_newcomer_is_encoded():
    assert finish_decoding_first([0.05, 0.2], encoder_seconds=0.3)
    assert not finish_decoding_first([0.05, 0.5], encoder_seconds=0.3)  # one still has long
    assert not finish_decoding_first([], encoder_seconds=0.3)  # none decoding
    # held back a whole pass already, the others still decoding: the estimate was wrong
    # (a decode past its expected length reads one step from done), so it joins
    assert not finish_decoding_first([0.05], encoder_seconds=0.3, deferred_seconds=0.3)
    assert finish_decoding_first([0.05], encoder_seconds=0.3, deferred_seconds=0.2)


def test_remaining_steps_follow_the_pace_kept_so_far():
    assert remaining_steps(produced=12, steps=3, expected_tokens=20, drafting=True) == 2.0
    assert remaining_steps(produced=0, steps=0, expected_tokens=20, drafting=False) == 20.0
    assert remaining_steps(produced=0, steps=0, expected_tokens=20, drafting=True) == 5.0
    assert remaining_steps(
        produced=30, steps=10, expected_tokens=20, drafting=True
    ) == pytest.approx(1 / 3)  # past the estimate: at least end of text is left


@given(st.floats(0.2, 3.0), st.integers(0, 64), st.floats(0.0, 2.0), st.floats(0.0, 1.5))
def test_partial_interval_stretches_with_load_within_bounds(base, streams, cost, final_load):
    pacing = PartialPacing(target_busy=0.8, max_interval_s=4.0)
    interval = pacing.interval(base, streams, cost, final_load)
    assert base <= interval <= max(base, 4.0)
    assert pacing.interval(base, streams + 1, cost, final_load) >= interval
    assert pacing.interval(base, streams, cost, final_load + 0.1) >= interval


def test_partial_interval_is_the_fair_share_of_the_spare_time():
    pacing = PartialPacing(target_busy=0.8, max_interval_s=10.0)
    # finals take half the time; 0.3 s of every second is left for 6 streams of 0.25 s
    # partials: each may have one every 5 s.
    assert pacing.interval(1.0, 6, 0.25, 0.5) == pytest.approx(5.0)
    assert pacing.interval(1.0, 1, 0.25, 0.0) == 1.0  # an idle worker keeps the base pace


def test_step_cost_model_learns_its_coefficients():
    model = StepCostModel(prior=(0.01, 0.001, 0.0005))
    truth = linear(0.008, 0.003, 0.0006)
    for rows, tokens in itertools.product(range(1, 9), range(1, 60, 7)):
        if tokens >= rows:
            model.observe(rows, tokens, truth(rows, tokens) * (1.02 if tokens % 2 else 0.98))
    c0, c_row, c_token = model.coefficients
    assert c0 == pytest.approx(0.008, rel=0.25)
    assert c_row == pytest.approx(0.003, rel=0.25)
    assert c_token == pytest.approx(0.0006, rel=0.25)


def test_step_cost_model_keeps_its_prior_where_data_says_nothing():
    """Only one-row, one-token steps: the per-token cost stays at the prior."""
    model = StepCostModel(prior=(0.01, 0.002, 0.001))
    for _ in range(50):
        model.observe(1, 1, 0.013)
    assert model(1, 1) == pytest.approx(0.013, rel=0.05)
    assert model.coefficients[2] > 0.0005


def gpu_like_steps(model: StepCostModel) -> None:
    """What an H200 timed with large-v3 (bench/files_gpu.py): about 4 ms a step, whatever
    its rows and tokens, plain steps of one and two rows and drafted steps of one."""
    for rows in (1, 2, 4, 8, 16):
        model.observe(rows, rows, 0.0045)
    for _ in range(100):
        model.observe(2, 2, 0.0041)
        model.observe(1, 1, 0.0039)
    for draft in (4, 6, 8, 10, 12, 14, 15):
        model.observe(1, 1 + draft, 0.0042)


def test_one_stalled_step_does_not_stop_drafting():
    """On the H200 one step stalled (a first use of some kernel, a pause of the process)
    and the fit put all of it on the tokens: drafting looked 145 ms a token, two rows got
    no drafts for the rest of the recording, and no drafted step came to correct it."""
    model = StepCostModel(prior=STEP_COST_PRIOR)
    gpu_like_steps(model)
    assert min(draft_budgets([0.8, 0.8], model, 15)) >= 10  # drafting is nearly free here
    model.observe(2, 12, 3.0)
    assert min(draft_budgets([0.8, 0.8], model, 15)) >= 5  # (it was [0, 0])
    assert model(2, 2) < 0.010


def test_a_machine_that_slows_down_is_learnt_as_its_steps_come():
    """A stalled step is bounded; steps that stay slow are not."""
    model = StepCostModel(prior=STEP_COST_PRIOR)
    gpu_like_steps(model)
    for _ in range(300):  # ten times slower now, and it stays so
        model.observe(1, 1, 0.040)
    assert model(1, 1) == pytest.approx(0.040, rel=0.1)


def test_encoder_costs_keep_batch_ratios_while_single_cost_drifts():
    costs = EncoderCosts(smoothing=1.0)
    costs.observe(1, 0.25)
    costs.observe(2, 0.45)  # 0.9 of two single passes
    costs.observe(1, 0.30)  # the machine got busier
    assert costs(2) == pytest.approx(0.9 * 2 * 0.30)
    assert costs(4) == pytest.approx(4 * 0.30)  # never timed: n single passes
    assert set(costs.known) == {1, 2}


def test_decaying_rate_measures_recent_work():
    rate = DecayingRate.starting(tau=10.0, now=0.0)
    for t in range(1, 101):
        rate = rate.add(0.5, now=float(t))  # half a second of work every second
    assert rate.rate(100.0) == pytest.approx(0.5, rel=0.1)
    assert rate.rate(140.0) < 0.05  # forty idle seconds later


def test_a_row_priced_out_of_drafts_is_offered_them_again():
    """Rejections a row was priced out by fade with the steps that verify nothing, so
    that the budgets offer it draft tokens again and its drafts are measured again."""
    acceptance = Acceptance()
    for _ in range(3):
        acceptance.observe(proposed=2, accepted=0)  # a draft parted at its first words

    def budget() -> int:  # beside nine rows whose drafts are kept
        return draft_budgets(
            [0.9] * 9 + [acceptance.probability], lambda r, t: 0.03 + 0.001 * r + 0.003 * t, 15
        )[-1]

    assert budget() == 0
    idle = 0
    while budget() == 0 and idle < 20:
        acceptance.observe(proposed=0, accepted=0)
        idle += 1
    assert 0 < idle < 10  # offered a token again within ten steps (0.6 s at ten rows)
    before = acceptance.probability
    acceptance.observe(proposed=budget(), accepted=budget())  # realigned: kept
    assert before < acceptance.probability < 0.8


def test_acceptance_counts_runs_of_kept_draft_tokens():
    acceptance = Acceptance(prior_kept=0, prior_rejections=0)
    acceptance.observe(proposed=8, accepted=8)  # all kept: no rejection
    acceptance.observe(proposed=8, accepted=2)  # kept 2, then one rejected
    assert acceptance.probability == pytest.approx(10 / 11)


def test_the_asr_thread_takes_every_core_only_for_a_burst_of_finals():
    """Below ``burst_finals`` finals the ASR keeps to its own cores; from there it takes
    them all; 0 never bursts, and a burst never means fewer threads than the base."""
    threads = AsrThreads(base=1, burst=2, burst_finals=4)
    assert [threads.for_finals(n) for n in range(7)] == [1, 1, 1, 1, 2, 2, 2]
    assert {AsrThreads(1, 2, burst_finals=0).for_finals(n) for n in range(20)} == {1}
    assert AsrThreads(base=4, burst=2).for_finals(10) == 4
