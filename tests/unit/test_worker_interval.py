"""Young/Daly checkpoint interval: the formula, its bounds, and the policy around it."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, strategies as st

from spotreel.worker.interval import IntervalPolicy, optimal_interval_s

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
