"""Per-tenant quotas: the in-flight check and the admission token bucket."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.domain.quotas import Admission, RateLimit, TokenBucket, admit, has_in_flight_room, refill, refund
from tests.harness.hypothesis_profiles import examples

pytestmark = pytest.mark.unit


def test_in_flight_room():
    assert has_in_flight_room(0, None) and has_in_flight_room(10**6, None)
    assert has_in_flight_room(2, 3) and not has_in_flight_room(3, 3) and not has_in_flight_room(0, 0)


def test_bucket_starts_full_and_spends_its_burst():
    limit = RateLimit(burst=3, per_token_ms=1_000)
    bucket = None
    for _ in range(3):
        result = admit(bucket, limit, now_ms=0)
        assert result.admitted and result.retry_after_ms == 0
        bucket = result.bucket
    refused = admit(bucket, limit, now_ms=0)
    assert refused == Admission(False, TokenBucket(0, 0), 1_000)


def test_refill_keeps_the_partial_period_and_caps_at_burst():
    limit = RateLimit(burst=2, per_token_ms=1_000)
    empty = TokenBucket(0, 0)
    assert refill(empty, limit, 1_500) == TokenBucket(1, 1_000)
    refused = admit(TokenBucket(0, 1_000), limit, 1_500, cost=2)
    assert not refused.admitted and refused.retry_after_ms == 1_500
    assert admit(refused.bucket, limit, 1_499 + 1_500).admitted is True
    assert refill(empty, limit, 10_000) == TokenBucket(2, 10_000)
    # A clock that goes backwards earns nothing and is never told to wait a negative time.
    assert refill(TokenBucket(1, 5_000), limit, 4_000) == TokenBucket(1, 5_000)
    assert admit(TokenBucket(0, 5_000), limit, 4_000).retry_after_ms == 2_000


def test_rate_limit_validation_and_per_second():
    assert RateLimit.per_second(10, burst=5) == RateLimit(5, 100)
    assert RateLimit.per_second(5_000, burst=5).per_token_ms == 1
    for bad in (lambda: RateLimit(0, 10), lambda: RateLimit(1, 0), lambda: RateLimit.per_second(0, 1)):
        with pytest.raises(ValueError):
            bad()
    with pytest.raises(ValueError, match="cost"):
        admit(None, RateLimit(2, 10), 0, cost=3)
    with pytest.raises(ValueError, match="cost"):
        admit(None, RateLimit(2, 10), 0, cost=0)


requests = st.lists(st.tuples(st.integers(0, 3_000), st.integers(1, 3)), max_size=40)


@settings(max_examples=examples(1_000), deadline=None)
@given(burst=st.integers(3, 6), period=st.integers(1, 500), gaps=requests)
def test_bucket_never_admits_more_than_burst_plus_refill(burst, period, gaps):
    limit = RateLimit(burst, period)
    bucket, now, spent = None, 0, 0
    for gap, cost in gaps:
        now += gap
        result = admit(bucket, limit, now, cost)
        bucket = result.bucket
        if result.admitted:
            spent += cost
        assert 0 <= bucket.tokens <= burst
        # Over any run from time 0 a tenant gets at most the burst plus what the rate earned since.
        assert spent <= burst + now // period


@settings(max_examples=examples(1_000), deadline=None)
@given(burst=st.integers(1, 6), period=st.integers(1, 500), gaps=requests, cost=st.integers(1, 6))
def test_retry_after_is_exact(burst, period, gaps, cost):
    limit = RateLimit(burst, period)
    cost = min(cost, burst)
    bucket, now = None, 0
    for gap, c in gaps:
        now += gap
        bucket = admit(bucket, limit, now, min(c, burst)).bucket
    result = admit(bucket, limit, now, cost)
    if result.admitted:
        return
    wait = result.retry_after_ms
    assert wait >= 1
    assert admit(result.bucket, limit, now + wait, cost).admitted
    assert not admit(result.bucket, limit, now + wait - 1, cost).admitted


@settings(max_examples=examples(300), deadline=None)
@given(burst=st.integers(1, 20), per=st.integers(1, 5_000), tokens=st.integers(0, 20), stamp=st.integers(0, 10**6),
       later=st.integers(0, 10**5))
def test_a_refund_undoes_an_admission_made_at_the_same_moment(burst, per, tokens, stamp, later):
    limit = RateLimit(burst=burst, per_token_ms=per)
    before = TokenBucket(min(tokens, burst), stamp)
    now = stamp + later
    result = admit(before, limit, now)
    if not result.admitted:  # nothing was taken, so nothing is given back (the gateway refunds admitted ones)
        return
    back = refund(result.bucket, limit, now)
    expected = refill(before, limit, now)
    assert back.tokens == expected.tokens <= burst
    # and the refunded bucket admits exactly as the uncharged one would, now and later
    for dt in (0, per, 3 * per):
        assert admit(back, limit, now + dt).admitted == admit(expected, limit, now + dt).admitted


def test_a_refund_never_fills_past_the_burst_and_a_bucket_never_charged_is_full():
    limit = RateLimit(burst=2, per_token_ms=1_000)
    assert refund(TokenBucket(2, 0), limit, 0).tokens == 2
    assert refund(None, limit, 5) == TokenBucket.full(limit, 5)
