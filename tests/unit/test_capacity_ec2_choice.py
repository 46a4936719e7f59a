"""The EC2 provider's pure choices: interruption rates, cost per video, ranking, backoff, the on-demand cap,
and the user data (no secret in it, and read back as written)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spotreel.services.capacity import ec2_choice as c
from spotreel.services.capacity.ec2_userdata import WorkerLaunch, read, render

pytestmark = pytest.mark.unit

A = c.Placement("g6.xlarge", "subnet-a", "us-east-1a")
B = c.Placement("g5.xlarge", "subnet-b", "us-east-1b")
C = c.Placement("g4dn.xlarge", "subnet-a", "us-east-1a")


def test_interruption_rate_is_losses_per_instance_hour_pulled_toward_the_prior():
    seen = [c.Seen("g6.xlarge", "us-east-1a", 0.0, 3600.0, interrupted=True),
            c.Seen("g6.xlarge", "us-east-1a", 0.0, None)]
    rates = c.interruption_rates(seen, now_s=3 * 3600.0, prior_per_hour=0.1, prior_hours=6.0)
    # 1 loss in 1 h + 3 h of running, plus the prior's 0.6 losses over 6 h
    assert rates[("g6.xlarge", "us-east-1a")] == pytest.approx((1 + 0.6) / (4 + 6))
    assert c.interruption_rates([], 0.0, 0.1, 6.0) == {}


def test_cost_per_video_adds_the_work_redone_per_expected_interruption():
    assert c.cost_per_video(3.6, 100, 0.0, 60) == pytest.approx(0.1)
    # 36 interruptions per hour over 100 s: 1 expected, 60 s redone
    assert c.cost_per_video(3.6, 100, 36.0, 60) == pytest.approx(0.16)


def test_a_cheap_but_often_interrupted_pool_loses_to_a_dearer_steady_one():
    prices = {A.pool_key: 1.0, B.pool_key: 1.1}
    rates = {A.pool_key: 30.0, B.pool_key: 0.1}
    ranked = c.rank(c.quote([A, B], prices, rates, 0.05, 600, 300), {}, 0.0)
    assert [q.placement for q in ranked] == [B, A]


def test_ranking_skips_placements_backing_off_and_puts_unknown_prices_last():
    quotes = c.quote([A, B, C], {A.pool_key: 2.0, B.pool_key: 1.0}, {}, 0.05, 60, 60)
    backoffs = {B: c.Backoff(1, until_s=50.0, last_error="InsufficientInstanceCapacity")}
    assert [q.placement for q in c.rank(quotes, backoffs, now_s=10.0)] == [A, C]
    assert [q.placement for q in c.rank(quotes, backoffs, now_s=50.0)] == [B, A, C]


def test_equal_prices_keep_the_operators_order_and_within_keeps_the_near_best():
    quotes = c.quote([A, B, C], {A.pool_key: 1.0, B.pool_key: 1.0, C.pool_key: 1.5}, {}, 0.05, 60, 60)
    ranked = c.rank(quotes, {}, 0.0)
    assert [q.placement for q in ranked] == [A, B, C]
    assert [q.placement for q in c.within(ranked, 0.2)] == [A, B]
    assert [q.placement for q in c.within(ranked, 0.5)] == [A, B, C]


def test_latest_prices_take_the_newest_record_per_pool():
    history = [{"InstanceType": "g6.xlarge", "AvailabilityZone": "us-east-1a", "SpotPrice": "0.5",
                "Timestamp": "2026-01-01T00:00:00Z"},
               {"InstanceType": "g6.xlarge", "AvailabilityZone": "us-east-1a", "SpotPrice": "0.7",
                "Timestamp": "2026-01-02T00:00:00Z"}]
    assert c.latest_prices(history) == {("g6.xlarge", "us-east-1a"): 0.7}


@given(st.integers(1, 200), st.floats(0.1, 100), st.floats(1, 10_000), st.floats(0, 1))
def test_backoff_doubles_up_to_the_cap_and_jitter_keeps_it_within_half_and_all(failures, base, cap, jitter):
    cap = max(cap, base)
    wait = c.backoff_s(failures, base, cap, jitter)
    full = min(cap, base * 2 ** (failures - 1))
    assert full / 2 - 1e-9 <= wait <= full + 1e-9
    assert c.backoff_s(failures + 1, base, cap, jitter) >= wait - 1e-9


def test_consecutive_errors_lengthen_the_backoff():
    first = c.after_error(None, "InsufficientInstanceCapacity", 100.0, 10.0, 600.0, 1.0)
    second = c.after_error(first, "InsufficientInstanceCapacity", 100.0, 10.0, 600.0, 1.0)
    assert (first.failures, first.until_s, second.until_s) == (1, 110.0, 120.0)


@given(st.integers(0, 50), st.integers(0, 100), st.integers(0, 50), st.floats(0, 1), st.integers(0, 50))
def test_on_demand_never_exceeds_its_share_or_count(shortfall, fleet, on_demand, share, max_count):
    on_demand = min(on_demand, fleet)
    k = c.on_demand_allowance(shortfall, fleet, on_demand, share, max_count)
    assert 0 <= k <= shortfall
    if k:
        assert on_demand + k <= max_count
        assert on_demand + k <= share * fleet + 1e-6


def test_on_demand_fills_the_shortfall_within_the_cap():
    assert c.on_demand_allowance(4, 8, 0, 0.5, 10) == 4  # 4 of 8
    assert c.on_demand_allowance(4, 8, 0, 0.5, 2) == 2
    assert c.on_demand_allowance(4, 8, 3, 0.5, 10) == 1
    assert c.on_demand_allowance(4, 8, 0, 0.0, 10) == 0


LAUNCH = WorkerLaunch("tiny-t2v@any", env=(("SPOTREEL_WORKER_GATEWAY_URL", "https://gw.example:8443"),
                                           ("SPOTREEL_CLOUD_NOTICES", "aws"), ("NOTE", 'a "quoted" \\ value')),
                      secrets=(("SPOTREEL_WORKER_KEY", "/spotreel/prod/worker-key"),))


def test_user_data_reads_back_as_written_with_the_instance_id_as_worker_id():
    plan = read(render(LAUNCH))
    assert plan.env == dict(LAUNCH.env)
    assert plan.secrets == {"SPOTREEL_WORKER_KEY": "/spotreel/prod/worker-key"}
    assert plan.argv == ["spotreel", "worker", "--pool", "tiny-t2v@any", "--worker-id", "{instance_id}"]
    assert plan.metadata_endpoint == "http://169.254.169.254"


def test_user_data_refuses_secrets_as_plain_settings_and_holds_only_parameter_names():
    with pytest.raises(ValueError, match="SSM parameter"):
        WorkerLaunch("p@g", env=(("SPOTREEL_WORKER_KEY", "sr_live_secret"),))
    text = render(LAUNCH)
    assert "/spotreel/prod/worker-key" in text and "--with-decryption" in text
    with pytest.raises(ValueError):
        render(WorkerLaunch("p@g", extra_args=("$(reboot)",)))
