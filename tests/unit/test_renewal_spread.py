"""The spread of renewals (domain.leases.spread_s, quiet_s): a holder renews a little early by its own draw,
never late, so holders leased or paced together stop renewing together."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spotreel.domain.leases import CADENCE_SPREAD, QUIET_SPREAD, quiet_s, spread_s

intervals = st.floats(min_value=0.0, max_value=3600.0, allow_nan=False)
draws = st.floats(min_value=0.0, max_value=1.0, exclude_max=True, allow_nan=False)
shares = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@given(intervals, draws, shares)
def test_a_spread_interval_is_never_longer_and_never_shorter_than_its_share_allows(interval, draw, share):
    got = spread_s(interval, draw, share)
    assert interval * (1.0 - share) - 1e-9 <= got <= interval


@given(intervals, draws, draws, shares)
def test_a_larger_draw_never_gives_a_longer_interval(interval, a, b, share):
    lo, hi = sorted((a, b))
    assert spread_s(interval, hi, share) <= spread_s(interval, lo, share)


@given(intervals, shares)
def test_a_draw_of_zero_keeps_the_nominal_interval(interval, share):
    assert spread_s(interval, 0.0, share) == interval


@given(st.floats(min_value=0.0, max_value=60.0, allow_nan=False), st.integers(min_value=1, max_value=600_000), draws)
def test_a_paced_quiet_time_stays_under_a_third_of_the_ttl_and_within_its_spread(hint, ttl_ms, draw):
    nominal = min(hint, ttl_ms / 3000.0)
    got = quiet_s(hint, ttl_ms, draw)
    assert nominal * (1.0 - QUIET_SPREAD) - 1e-9 <= got <= nominal


def test_out_of_range_draws_and_shares_are_clamped():
    assert spread_s(10.0, -1.0, 0.5) == 10.0
    assert spread_s(10.0, 2.0, 0.5) == 5.0
    assert spread_s(10.0, 1.0, 7.0) == 0.0
    assert 0.0 < CADENCE_SPREAD < QUIET_SPREAD < 1.0


def test_holders_paced_in_the_same_second_come_back_spread_over_its_share():
    """Two hundred holders answered together with the same hint: their next renewals no longer fall in one
    instant but over the last QUIET_SPREAD of the quiet time."""
    import random

    rng = random.Random(7)
    backs = sorted(quiet_s(10.0, 30_000, rng.random()) for _ in range(200))
    assert backs[0] >= 7.0 - 1e-9 and backs[-1] <= 10.0
    assert backs[-1] - backs[0] > 2.5  # spread over nearly the whole 3 s
    assert len({round(b, 1) for b in backs}) > 20  # not a few clumps
