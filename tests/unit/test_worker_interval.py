"""Young/Daly checkpoint interval: the formula, its bounds, and the policy around it."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, strategies as st

from spotreel.domain.checkpoint_interval import (MTBF_CEILING_S, MTBF_FLOOR_S, IntervalPolicy, estimated_mtbf_s,
                                      optimal_interval_s)

pytestmark = pytest.mark.unit

costs = st.floats(0, 1e4, allow_nan=False)
mtbfs = st.floats(1e-3, 1e7, allow_nan=False)
bounds = st.tuples(st.floats(1e-3, 1e4), st.floats(1e-3, 1e4)).map(sorted)


@given(costs, mtbfs, bounds)
def test_result_is_young_daly_clamped_to_the_bounds(c: float, m: float, lohi: list[float]) -> None:
    lo, hi = lohi
    got = optimal_interval_s(c, m, lo, hi)
    assert lo <= got <= hi
    raw = math.sqrt(2 * c * m)
    if lo <= raw <= hi:
        assert got == pytest.approx(raw, rel=1e-12)
    else:
        assert got == (lo if raw < lo else hi)


@given(costs, costs, mtbfs, bounds)
def test_a_dearer_checkpoint_never_shortens_the_interval(c1: float, c2: float, m: float, lohi) -> None:
    lo, hi = lohi
    a, b = sorted((c1, c2))
    assert optimal_interval_s(a, m, lo, hi) <= optimal_interval_s(b, m, lo, hi)


@given(costs, mtbfs, mtbfs, bounds)
def test_more_frequent_preemption_never_lengthens_the_interval(c: float, m1: float, m2: float, lohi) -> None:
    lo, hi = lohi
    a, b = sorted((m1, m2))
    assert optimal_interval_s(c, a, lo, hi) <= optimal_interval_s(c, b, lo, hi)


@given(st.floats(1e-3, 10), st.floats(60, 1e5))
def test_the_interval_minimises_expected_waste(c: float, m: float) -> None:
    """Waste per second of work ≈ C/τ + τ/(2M) (checkpoint overhead + half an interval lost per failure);
    sqrt(2CM) is its minimum, so nudging τ either way costs more."""
    tau = optimal_interval_s(c, m, 1e-9, 1e12)
    waste = lambda t: c / t + t / (2 * m)  # noqa: E731
    assume(tau > 0)
    assert waste(tau) <= waste(tau * 1.1) and waste(tau) <= waste(tau * 0.9)


def test_worked_example() -> None:
    # A 2 s checkpoint on a pool preempted about once an hour: every 120 s.
    assert optimal_interval_s(2.0, 3600.0, 5.0, 600.0) == pytest.approx(120.0)
    assert optimal_interval_s(0.0, 3600.0, 5.0, 600.0) == 5.0
    assert optimal_interval_s(2.0, math.inf, 5.0, 600.0) == 600.0


@pytest.mark.parametrize("args, match", [
    ((-1.0, 10.0, 1.0, 2.0), "cost"), ((math.nan, 10.0, 1.0, 2.0), "cost"), ((1.0, 0.0, 1.0, 2.0), "MTBF"),
    ((1.0, -5.0, 1.0, 2.0), "MTBF"), ((1.0, 10.0, 0.0, 2.0), "bounds"), ((1.0, 10.0, 3.0, 2.0), "bounds"),
])
def test_bad_input_is_refused_clearly(args, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        optimal_interval_s(*args)


def test_fixed_policy_ignores_cost() -> None:
    p = IntervalPolicy.fixed(30.0)
    p.record_cost(100.0)
    assert p.interval_s == 30.0
    assert not p.due(now=129.9, last_ckpt_at=100.0)
    assert p.due(now=130.0, last_ckpt_at=100.0)


def test_adaptive_policy_follows_the_measured_cost() -> None:
    p = IntervalPolicy.adaptive(mtbf_s=3600.0, lo_s=1.0, hi_s=10_000.0)
    assert p.interval_s == 1.0  # nothing measured yet: cost 0 → the lower bound
    p.record_cost(2.0)
    assert p.interval_s == pytest.approx(120.0)
    for _ in range(50):
        p.record_cost(8.0)
    assert p.cost_s == pytest.approx(8.0, rel=1e-6)
    assert p.interval_s == pytest.approx(240.0, rel=1e-6)
    p.observe_mtbf(900.0)
    assert p.interval_s == pytest.approx(120.0, rel=1e-6)
    assert p.due(now=1000.0 + 120.0, last_ckpt_at=1000.0)
    assert not p.due(now=1000.0 + 100.0, last_ckpt_at=1000.0)


@given(st.lists(st.floats(0, 100), min_size=1, max_size=30))
def test_smoothed_cost_stays_within_the_samples(samples: list[float]) -> None:
    p = IntervalPolicy.adaptive(mtbf_s=100.0)
    for s in samples:
        p.record_cost(s)
    assert min(samples) - 1e-9 <= p.cost_s <= max(samples) + 1e-9


def test_policy_refuses_bad_settings() -> None:
    with pytest.raises(ValueError, match="fixed interval"):
        IntervalPolicy.fixed(0)
    with pytest.raises(ValueError, match="bounds"):
        IntervalPolicy.adaptive(mtbf_s=100.0, lo_s=10.0, hi_s=1.0)
    with pytest.raises(ValueError, match="MTBF"):
        IntervalPolicy.adaptive(mtbf_s=100.0).observe_mtbf(0)
    with pytest.raises(ValueError, match="cost"):
        IntervalPolicy.adaptive(mtbf_s=100.0).record_cost(-1)


# -- the pool's measured loss rate, with the configured MTBF as the prior -----------------------------------

priors = st.floats(1.0, 1e6, allow_nan=False)
weights = st.floats(0.01, 100, allow_nan=False)
losses = st.integers(0, 100_000)
leased = st.floats(0, 1e8, allow_nan=False)


@given(priors, weights, losses, leased)
def test_the_estimate_is_bounded(prior: float, k: float, n: int, t: float) -> None:
    assert MTBF_FLOOR_S <= estimated_mtbf_s(prior, k, n, t) <= MTBF_CEILING_S


@given(priors, weights, losses, losses, leased, costs, bounds)
def test_more_losses_never_lengthen_the_interval(prior: float, k: float, n1: int, n2: int, t: float, c: float,
                                                 lohi) -> None:
    lo, hi = lohi
    few, many = sorted((n1, n2))
    assert estimated_mtbf_s(prior, k, many, t) <= estimated_mtbf_s(prior, k, few, t)
    assert (optimal_interval_s(c, estimated_mtbf_s(prior, k, many, t), lo, hi)
            <= optimal_interval_s(c, estimated_mtbf_s(prior, k, few, t), lo, hi))


@given(priors, weights, losses, leased, leased)
def test_more_leased_time_for_the_same_losses_never_shortens_the_mtbf(prior: float, k: float, n: int, t1: float,
                                                                      t2: float) -> None:
    short, long = sorted((t1, t2))
    assert estimated_mtbf_s(prior, k, n, short) <= estimated_mtbf_s(prior, k, n, long)


@given(priors, weights, st.integers(1, 100_000), st.floats(1.0, 1e8))
def test_the_estimated_rate_lies_between_the_prior_and_the_measurement(prior: float, k: float, n: int,
                                                                       t: float) -> None:
    rate = 1 / estimated_mtbf_s(prior, k, n, t)
    lo, hi = sorted((1 / prior, n / t))
    assume(1 / MTBF_CEILING_S < rate < 1 / MTBF_FLOOR_S)  # not clamped
    assert lo * (1 - 1e-9) <= rate <= hi * (1 + 1e-9)


def test_the_prior_rules_until_the_pool_has_measured_and_fades_as_leased_time_grows() -> None:
    assert estimated_mtbf_s(3600.0, 1.0, 0, 0.0) == pytest.approx(3600.0)
    # one lease-hour in which 12 leases were lost: the pool's MTBF is 5 min, the 1 h prior weighs one loss
    assert estimated_mtbf_s(3600.0, 1.0, 12, 3600.0) == pytest.approx(7200.0 / 13)
    # a hundred lease-hours with 1200 losses: the prior has all but vanished
    assert estimated_mtbf_s(3600.0, 1.0, 1200, 360_000.0) == pytest.approx(300.0, rel=0.01)
    # a quiet pool moves the estimate up, not to infinity
    assert estimated_mtbf_s(3600.0, 1.0, 0, 36_000.0) == pytest.approx(39_600.0)
    assert estimated_mtbf_s(math.inf, 1.0, 0, 0.0) == MTBF_CEILING_S


@pytest.mark.parametrize("args, match", [
    ((0.0, 1.0, 0, 0.0), "prior MTBF"), ((math.nan, 1.0, 0, 0.0), "prior MTBF"), ((60.0, 0.0, 0, 0.0), "weight"),
    ((60.0, 1.0, -1, 0.0), "measured"), ((60.0, 1.0, 0, math.inf), "measured"),
])
def test_bad_estimate_inputs_are_refused(args, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        estimated_mtbf_s(*args)


def test_the_policy_tracks_the_pools_loss_rate_around_its_prior() -> None:
    p = IntervalPolicy.adaptive(mtbf_s=3600.0, lo_s=1.0, hi_s=10_000.0)
    p.record_cost(2.0)
    assert p.interval_s == pytest.approx(120.0)  # sqrt(2 * 2 * 3600): the prior alone
    assert p.observe_pool(losses=35, leased_s=3600.0) == pytest.approx(200.0)  # (3600 + 3600) / 36
    assert p.interval_s == pytest.approx(math.sqrt(2 * 2 * 200.0))
    p.observe_pool(losses=0, leased_s=3600.0)  # the storm passed: back above the prior
    assert p.mtbf_s == pytest.approx(7200.0)
    assert p.interval_s == pytest.approx(math.sqrt(2 * 2 * 7200.0))
    assert p.prior_mtbf_s == 3600.0  # the prior itself never moves
    fixed = IntervalPolicy.fixed(30.0)
    fixed.observe_pool(losses=100, leased_s=60.0)
    assert fixed.interval_s == 30.0
