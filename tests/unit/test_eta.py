"""Queue position and wait estimates."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.domain.eta import Eta, estimate, fair_jobs_ahead, percentile
from tests.harness.hypothesis_profiles import examples

pytestmark = pytest.mark.unit


def test_fluid_estimate_examples():
    # 9 ahead, 4 workers at 2 minutes a job: 10 jobs through 4 workers = 5 minutes.
    assert estimate(9, active_workers=4, gen_time_ms=120_000) == Eta(10, 300_000)
    # Rounds up to the millisecond, never down.
    assert estimate(0, active_workers=3, gen_time_ms=1_000).wait_ms == 334


def test_idle_workers_take_the_first_jobs_at_once():
    assert estimate(1, active_workers=4, gen_time_ms=60_000, idle_workers=2) == Eta(2, 0)
    assert estimate(2, active_workers=4, gen_time_ms=60_000, idle_workers=2) == Eta(3, 15_000)


def test_zero_workers_means_no_estimate_unless_cold_start_is_known():
    assert estimate(5, active_workers=0, gen_time_ms=60_000) == Eta(6, None)
    assert estimate(5, 0, 60_000).wait_seconds is None
    cold = estimate(5, active_workers=0, gen_time_ms=60_000, cold_start_ms=90_000)
    assert cold == Eta(6, 90_000 + 6 * 60_000)
    assert cold.wait_ms == 90_000 + estimate(5, 1, 60_000).wait_ms


def test_wait_seconds_rounds_up():
    assert Eta(1, 1).wait_seconds == 1 and Eta(1, 1_000).wait_seconds == 1 and Eta(1, 0).wait_seconds == 0


@pytest.mark.parametrize(
    "args",
    [(-1, 1, 1), (0, -1, 1), (0, 1, -1)],
)
def test_estimate_rejects_negative_inputs(args):
    with pytest.raises(ValueError):
        estimate(*args)


def test_estimate_rejects_bad_idle_and_cold_start():
    with pytest.raises(ValueError, match="idle_workers"):
        estimate(0, 2, 10, idle_workers=3)
    with pytest.raises(ValueError, match="cold_start_ms"):
        estimate(0, 0, 10, cold_start_ms=-1)


def test_percentile_nearest_rank():
    samples = [50, 10, 40, 20, 30]
    assert percentile(samples, 50) == 30
    assert percentile(samples, 90) == 50
    assert percentile(samples, 100) == 50
    assert percentile(samples, 1) == 10
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile(samples, 0)


def test_fair_jobs_ahead():
    # Own tier holds 3 ahead; while 4 of ours go, an equal-weight tenant gets 4 (it has 100 queued),
    # a tenant with 2 queued gets its 2, a weight-3 tenant gets 12.
    assert fair_jobs_ahead(3, 1.0, [(100, 1.0), (2, 1.0), (100, 3.0)]) == 3 + 4 + 2 + 12
    assert fair_jobs_ahead(0, 2.0, []) == 0
    with pytest.raises(ValueError):
        fair_jobs_ahead(-1, 1.0, [])


args = dict(
    ahead=st.integers(0, 10_000),
    workers=st.integers(0, 500),
    gen=st.integers(0, 3_600_000),
    idle=st.integers(0, 50),
    cold=st.none() | st.integers(0, 600_000),
)


@settings(max_examples=examples(1_000), deadline=None)
@given(**args)
def test_wait_is_monotone_in_queue_position(ahead, workers, gen, idle, cold):
    idle = min(idle, workers)
    here, behind = estimate(ahead, workers, gen, idle, cold), estimate(ahead + 1, workers, gen, idle, cold)
    assert behind.queue_position == here.queue_position + 1 == ahead + 2
    if here.wait_ms is None:
        assert behind.wait_ms is None and workers == 0 and cold is None
    else:
        assert 0 <= here.wait_ms <= behind.wait_ms


@settings(max_examples=examples(1_000), deadline=None)
@given(**args)
def test_wait_is_non_increasing_in_worker_count(ahead, workers, gen, idle, cold):
    idle = min(idle, workers)
    fewer, more = estimate(ahead, workers, gen, idle, cold), estimate(ahead, workers + 1, gen, idle, cold)
    assert more.wait_ms is not None
    if fewer.wait_ms is not None:
        assert more.wait_ms <= fewer.wait_ms


@settings(max_examples=examples(1_000), deadline=None)
@given(own=st.integers(0, 1_000), weight=st.sampled_from([0.5, 1.0, 3.0]),
       others=st.lists(st.tuples(st.integers(0, 1_000), st.sampled_from([0.5, 1.0, 3.0])), max_size=6))
def test_fair_jobs_ahead_bounded_by_fifo_and_monotone(own, weight, others):
    ahead = fair_jobs_ahead(own, weight, others)
    assert own <= ahead <= own + sum(c for c, _ in others)
    assert fair_jobs_ahead(own + 1, weight, others) >= ahead


# -- idle workers with another model loaded: a model switch first ---------------------------------------------


def test_an_idle_worker_with_another_model_loaded_starts_after_the_switch():
    # 2 idle workers, one of them has another model loaded: the first job starts at once, the second after
    # the 45 s switch, the third on a busy worker's finish but not before the switch either.
    assert estimate(0, 4, 60_000, idle_workers=2, cold_idle_workers=1, switch_ms=45_000) == Eta(1, 0)
    assert estimate(1, 4, 60_000, idle_workers=2, cold_idle_workers=1, switch_ms=45_000) == Eta(2, 45_000)
    assert estimate(2, 4, 60_000, idle_workers=2, cold_idle_workers=1, switch_ms=45_000) == Eta(3, 45_000)
    assert estimate(5, 4, 60_000, idle_workers=2, cold_idle_workers=1, switch_ms=45_000) == Eta(6, 60_000)
    # nobody has the model loaded: even the next job waits for a switch
    assert estimate(0, 1, 60_000, idle_workers=1, cold_idle_workers=1, switch_ms=45_000) == Eta(1, 45_000)
    with pytest.raises(ValueError, match="cold_idle_workers"):
        estimate(0, 2, 60_000, idle_workers=1, cold_idle_workers=2)


@settings(max_examples=examples(500), deadline=None)
@given(ahead=st.integers(0, 200), workers=st.integers(1, 50), gen=st.integers(0, 600_000), idle=st.integers(0, 50),
       cold=st.integers(0, 50), switch=st.integers(0, 600_000))
def test_switch_cost_keeps_the_estimate_monotone(ahead, workers, gen, idle, cold, switch):
    idle = min(idle, workers)
    cold = min(cold, idle)
    here = estimate(ahead, workers, gen, idle, cold_idle_workers=cold, switch_ms=switch)
    assert here.wait_ms <= estimate(ahead + 1, workers, gen, idle, cold_idle_workers=cold, switch_ms=switch).wait_ms
    plain = estimate(ahead, workers, gen, idle)
    assert plain.wait_ms <= here.wait_ms  # a switch never makes a job start sooner
    if cold:  # one worker fewer to switch (it has the model loaded) never lengthens the wait
        assert estimate(ahead, workers, gen, idle, cold_idle_workers=cold - 1, switch_ms=switch).wait_ms <= here.wait_ms
