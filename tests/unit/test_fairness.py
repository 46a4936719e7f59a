"""Fair share across tenants, shown by simulating dispatch through the pure functions.

The simulation is a small discrete-event loop: W identical workers, each job runs exactly its
est_gpu_seconds, a finished worker settles its tenant's account and asks for the next job at once.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter

import pytest

from spotreel.domain.aging import AgingPolicy
from spotreel.domain.job_choice import DispatchConfig, DispatchIndex, QueuedJob, choose
from spotreel.domain.fairness import DecayingTotal, TenantAccount, TenantPolicy, TenantUsage, share
from spotreel.domain.pools import WorkerOffer

pytestmark = pytest.mark.unit

NO_AGING = DispatchConfig(aging=AgingPolicy(step_ms=None, max_wait_ms=None))
WORKER = WorkerOffer("w", "h100", frozenset({"m"}), frozenset({"m"}))


def flood(tenant: str, count: int, first_ms: int = 0, priority: int = 9, gpu_s: float = 60.0) -> list[QueuedJob]:
    return [
        QueuedJob(f"{tenant}{i:05d}", tenant, priority, "m", "h100", first_ms + i, gpu_s) for i in range(count)
    ]


def simulate(jobs, slots, workers=4, policies=None, config=NO_AGING, half_life_ms=None, arrivals=()):
    """Dispatch up to ``slots`` jobs; returns [(dispatch time ms, job)]. ``arrivals`` are (ms, jobs) pairs
    added to the queue once the clock reaches them."""
    policies = policies or {}
    index = DispatchIndex(jobs)
    accounts: dict[str, TenantAccount] = {}
    pending = sorted(arrivals, key=lambda a: a[0])
    events = [(0, w, None) for w in range(workers)]  # (time, worker, job it just finished)
    heapq.heapify(events)
    out: list[tuple[int, QueuedJob]] = []
    while events and len(out) < slots:
        now, w, finished = heapq.heappop(events)
        while pending and pending[0][0] <= now:
            for j in pending.pop(0)[1]:
                index.add(j)
        if finished is not None:
            acc = accounts[finished.tenant]
            used = finished.est_gpu_seconds
            accounts[finished.tenant] = acc.on_finish(used, used, now, half_life_ms)
        usage = {t: a.usage(now, half_life_ms) for t, a in accounts.items()}
        picked = index.choose(WORKER, usage, policies, now, config)
        if picked is None:
            if pending:
                heapq.heappush(events, (pending[0][0], w, None))
            continue
        job = index.discard(picked)
        accounts[job.tenant] = accounts.get(job.tenant, TenantAccount(job.tenant)).on_dispatch(job.est_gpu_seconds)
        out.append((now, job))
        heapq.heappush(events, (now + int(job.est_gpu_seconds * 1000), w, job))
    return out


def test_small_tenant_is_not_drowned_by_a_flood():
    # a floods 1,000 top-priority jobs first; b's 10 arrive after (equal weights).
    dispatched = simulate(flood("a", 1000) + flood("b", 10, first_ms=5_000), slots=60)
    b_slots = [n for n, (_, j) in enumerate(dispatched, start=1) if j.tenant == "b"]
    assert len(b_slots) == 10
    # b takes every other slot while it has work: its 10th job is dispatched by slot 20.
    assert b_slots == list(range(2, 21, 2))
    assert all(j.tenant == "a" for _, j in dispatched[20:])


def test_small_tenant_arriving_late_catches_up_at_once():
    # a has had the whole pool for ten minutes; b then submits 10 and gets the next 10 slots (no decay).
    dispatched = simulate(
        flood("a", 1000), slots=80, arrivals=[(600_000, flood("b", 10, first_ms=600_000))]
    )
    first_b = next(n for n, (_, j) in enumerate(dispatched) if j.tenant == "b")
    assert [j.tenant for _, j in dispatched[first_b:first_b + 10]] == ["b"] * 10
    assert dispatched[first_b][0] == 600_000


def test_weights_three_to_one_split_the_slots_three_to_one():
    policies = {"a": TenantPolicy(weight=3.0), "b": TenantPolicy(weight=1.0)}
    dispatched = simulate(flood("a", 1000) + flood("b", 1000), slots=400, policies=policies)
    counts = Counter(j.tenant for _, j in dispatched)
    assert counts == {"a": 300, "b": 100}
    # Not only in total: every prefix stays within two jobs of the 3:1 line.
    b_so_far = 0
    for n, (_, j) in enumerate(dispatched, start=1):
        b_so_far += j.tenant == "b"
        assert abs(b_so_far - n / 4) <= 2


def test_fairness_is_in_gpu_seconds_not_in_jobs():
    # b's jobs cost twice as much, so with equal weights b gets half as many jobs and equal GPU time.
    dispatched = simulate(flood("a", 1000, gpu_s=60.0) + flood("b", 1000, gpu_s=120.0), slots=300)
    gpu = Counter()
    for _, j in dispatched:
        gpu[j.tenant] += j.est_gpu_seconds
    assert abs(gpu["a"] - gpu["b"]) <= 120.0
    counts = Counter(j.tenant for _, j in dispatched)
    assert abs(counts["a"] - 2 * counts["b"]) <= 2


def test_in_flight_quota_caps_concurrency_in_the_simulation():
    policies = {"a": TenantPolicy(max_in_flight=1)}
    dispatched = simulate(flood("a", 50) + flood("b", 50, first_ms=1_000), slots=40, policies=policies)
    # With 4 workers and a capped at one job at a time, b fills the other three.
    first_round = [j.tenant for t, j in dispatched if t == 0]
    assert Counter(first_round) == {"a": 1, "b": 3}


def test_decay_lets_old_usage_fade():
    # a burned an hour of GPU an hour ago, b 100 s just now. With a 10-minute half-life a's burst has
    # faded below b's recent use, so a wins the slot; without decay a is charged forever and b wins.
    heavy = TenantAccount("a").on_dispatch(3600.0).on_finish(3600.0, 3600.0, now_ms=0, half_life_ms=600_000)
    light = TenantAccount("b").on_dispatch(100.0).on_finish(100.0, 100.0, now_ms=3_500_000, half_life_ms=600_000)
    at = 3_600_000
    decayed = {"a": heavy.usage(at, 600_000), "b": light.usage(at, 600_000)}
    assert decayed["a"].gpu_seconds == pytest.approx(3600.0 / 64)
    assert decayed["b"].gpu_seconds == pytest.approx(100.0 * 0.5 ** (1 / 6))
    jobs = flood("a", 1) + flood("b", 1)
    assert choose(WORKER, jobs, decayed, {}, at, NO_AGING) == "a00000"
    plain = {"a": heavy.usage(at, None), "b": light.usage(at, None)}
    assert plain["a"].gpu_seconds == 3600.0
    assert choose(WORKER, jobs, plain, {}, at, NO_AGING) == "b00000"


def test_decay_in_the_simulation_bounds_how_long_a_late_tenant_monopolizes():
    # Same story as the late-arrival test, but with a 1-minute half-life a's ten minutes are mostly
    # forgotten: b still goes first, yet a is back in the rotation well before b's 10 jobs are done.
    dispatched = simulate(
        flood("a", 1000), slots=80, half_life_ms=60_000,
        arrivals=[(600_000, flood("b", 10, first_ms=600_000))],
    )
    first_b = next(n for n, (_, j) in enumerate(dispatched) if j.tenant == "b")
    window = [j.tenant for _, j in dispatched[first_b:first_b + 10]]
    assert window[0] == "b" and "a" in window
    assert sum(1 for _, j in dispatched if j.tenant == "b") == 10


def test_decaying_total_arithmetic():
    total = DecayingTotal().add(100.0, now_ms=1_000, half_life_ms=1_000)
    assert total == DecayingTotal(100.0, 1_000)
    assert total.at(2_000, 1_000).value == pytest.approx(50.0)
    assert total.at(3_000, 1_000).add(10.0, 3_000, 1_000).value == pytest.approx(35.0)
    # Time going backwards neither grows nor rewinds the total.
    assert total.at(500, 1_000) == total
    assert DecayingTotal(0.0, 0).at(5_000, 1_000) == DecayingTotal(0.0, 5_000)
    assert math.isclose(total.at(1_000 + 10 * 1_000, 1_000).value, 100.0 / 1024)


def test_account_charges_estimate_in_flight_then_actual_usage():
    acc = TenantAccount("a").on_dispatch(60.0).on_dispatch(30.0)
    assert acc.usage(0, None) == TenantUsage("a", 90.0, 2)
    # The 60 s estimate ran for 80 s (say it was slow); usage follows what really ran.
    acc = acc.on_finish(60.0, 80.0, now_ms=10, half_life_ms=None)
    assert acc.usage(10, None) == TenantUsage("a", 110.0, 1)
    acc = acc.on_finish(30.0, 30.1, now_ms=20, half_life_ms=None)
    assert acc.in_flight == 0 and acc.in_flight_est_gpu_seconds == 0.0
    # A stray finish (duplicate event) never drives in_flight negative.
    assert acc.on_finish(1.0, 0.0, 30, None).in_flight == 0


def test_share_is_usage_over_weight():
    assert share(TenantUsage("a", 90.0), TenantPolicy(weight=3.0)) == 30.0
    assert share(None, TenantPolicy()) == 0.0
