"""The scheduler's preemption step (services/scheduler/preempting.py) and the routing that sends the freed
worker to the waiting higher tier (dispatch/order.py)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from spotreel.dispatch.order import PoolQueues, top_tier
from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.domain.preemption import Budget
from spotreel.services.scheduler.metrics import Metrics
from spotreel.services.scheduler.partition import PartitionState, WorkerSeen
from spotreel.services.scheduler.poolstats import pool_stats
from spotreel.domain.state import Status
from spotreel.services.scheduler.preempting import decide_pool, note_asked, preemptible_by_tier, running_of, tiers_of
from tests.unit.jobkit import POOL, T0, Driver, leased_job

pytestmark = pytest.mark.unit

BUDGET = Budget(per_minute=2, min_run_ms=10_000)


def _owner(*drivers: Driver, partition: int = 1) -> tuple[PartitionState, dict]:
    part = PartitionState(partition)
    states = {}
    for d in drivers:
        part.observe(None, d.s)
        states[d.job_id] = d.s
    return part, states


def _stats(partition: int, tiers: dict[int, int], at_ms: int, idle: int = 0) -> ev.PoolStats:
    return ev.PoolStats(pool=POOL, partition=partition, at_ms=at_ms, queued=sum(tiers.values()), leased=0,
                        oldest_wait_ms=0, queued_by_tier=tuple(f"{k}={v}" for k, v in tiers.items()),
                        idle_workers=idle)


def test_a_higher_tier_waiting_on_another_partition_asks_back_the_owned_lower_tier_lease() -> None:
    low = leased_job(key="low", priority=1)
    part, states = _owner(low)
    now = T0 + 30_000
    got = decide_pool(POOL, {1: part}, [_stats(0, {9: 1}, now - 500)], now, BUDGET, lambda w: True)
    assert [(p, c.job_id, c.for_priority) for p, c in got] == [(1, low.job_id, 9)]
    # Too young, a stale record, an idle worker elsewhere, or the budget spent: nothing.
    assert decide_pool(POOL, {1: part}, [_stats(0, {9: 1}, T0)], T0 + 5_000, BUDGET, lambda w: True) == []
    assert decide_pool(POOL, {1: part}, [_stats(0, {9: 1}, T0)], now, BUDGET, lambda w: True) == []
    assert decide_pool(POOL, {1: part}, [_stats(0, {9: 1}, now, idle=1)], now, BUDGET,
                       lambda w: True) == []
    note_asked(part, POOL, now - 2_000)
    note_asked(part, POOL, now - 1_000)
    assert decide_pool(POOL, {1: part}, [_stats(0, {9: 1}, now)], now, BUDGET, lambda w: True) == []


def test_a_worker_freed_by_a_preemption_counts_as_free_until_it_holds_a_lease_again() -> None:
    low = leased_job(key="low", priority=1)
    part, states = _owner(low)
    now = T0 + 30_000
    part.freed["w9"] = now - 1_000
    part.worker_asked("w9", WorkerSeen(now - 1_000, False, (POOL,), False))
    others = [_stats(0, {9: 1}, now)]
    assert decide_pool(POOL, {1: part}, others, now, BUDGET, lambda w: w != "w9") == []
    assert len(decide_pool(POOL, {1: part}, others, now, BUDGET, lambda w: True)) == 1


def test_an_under_served_tenant_waiting_elsewhere_gets_a_lease_of_the_over_served_one_when_enabled() -> None:
    held = leased_job(key="held", priority=5)  # tenant acme
    part, states = _owner(held)
    now = T0 + 30_000
    newcomer = ev.PoolStats(pool=POOL, partition=0, at_ms=now, queued=1, leased=0, oldest_wait_ms=0,
                            queued_by_tier=("5=1",), queued_by_tenant=("newco=1",))
    shares = {"acme": 120.0, "newco": 0.0}
    args = (POOL, {1: part}, [newcomer], now, BUDGET, lambda w: True)
    assert decide_pool(*args) == []  # same tier: no priority preemption, and fair share is off
    got = decide_pool(*args, 2, shares.get, shares.get)
    assert [(p, c.job_id, c.reason, c.for_tenant) for p, c in got] == [(1, held.job_id, "fair_share", "newco")]
    # A newcomer at its ceiling (share_if_room None) takes nothing.
    assert decide_pool(*args, 2, lambda t: None if t == "newco" else shares[t], shares.get) == []


def test_other_instances_requests_and_yielding_leases_count_through_their_pool_stats() -> None:
    low = leased_job(key="low", priority=1)
    part, states = _owner(low)
    now = T0 + 30_000
    waiting = _stats(0, {9: 1}, now)
    assert len(decide_pool(POOL, {1: part}, [waiting], now, BUDGET, lambda w: True)) == 1
    yielding = replace(waiting, preempting=1)  # another owner's lease is already yielding for that job
    assert decide_pool(POOL, {1: part}, [yielding], now, BUDGET, lambda w: True) == []
    spent = replace(waiting, preempted_1m=2)  # another owner used the pool's budget this minute
    assert decide_pool(POOL, {1: part}, [spent], now, BUDGET, lambda w: True) == []


def test_pool_stats_report_the_leases_yielding_and_the_requests_of_the_last_minute() -> None:
    d = leased_job(key="y", priority=1)
    part, _ = _owner(d)
    before = d.s
    d.send(c.PreemptLease("p", d.job_id, 1, 9))
    part.observe(before, d.s)
    note_asked(part, POOL, T0 - 70_000)  # out of the minute
    note_asked(part, POOL, T0 - 1_000)
    (stats,) = pool_stats(part, T0)
    assert (stats.preempting, stats.preempted_1m) == (1, 1)
    before = d.s
    d.release(reason="paused")
    part.observe(before, d.s)
    assert pool_stats(part, T0)[0].preempting == 0


def test_queued_by_tier_entries_and_routing_to_the_highest_tier_first() -> None:
    assert tiers_of(["1=2", "9=1", "bad"]) == {1: 2, 9: 1}
    assert top_tier(["1=3", "9=0", "5=1"]) == 5 and top_tier([]) == -1
    queues = PoolQueues()
    queues.record(_stats(0, {1: 5}, T0))
    queues.record(_stats(2, {9: 1}, T0))
    assert queues.partitions_with_work(["tiny-t2v"]) == [2, 0]


def test_a_release_for_a_preemption_is_counted_with_its_reason() -> None:
    d = leased_job(priority=1)
    m = Metrics()
    before = d.s
    released = ev.LeaseReleased(d.job_id, 3, T0, "rel", 1, "w1", "preempted_for", 0)
    m.observe_lease_end(before, released)
    assert m.preemptions.labels(POOL, "preempted_for")._value.get() == 1  # noqa: SLF001


def test_only_the_owner_of_the_lowest_partition_with_a_lease_to_ask_back_decides() -> None:
    """Two instances deciding in the same second would each spend the pool's budget: the owner of the lowest
    partition holding a lease that may be asked back (below the waiting tier) decides, the others wait."""
    low = leased_job(key="low", priority=1)
    part, states = _owner(low, partition=1)
    now = T0 + 30_000
    waiting = replace(_stats(0, {9: 1}, now), preemptible_by_tier=("1=1",))  # partition 0 holds one too
    assert decide_pool(POOL, {1: part}, [waiting], now, BUDGET, lambda w: True) == []
    # Partition 0's lease is of the waiting tier (no candidate there), or already asked: partition 1 decides.
    for other in (("9=1",), ()):
        got = decide_pool(POOL, {1: part}, [replace(waiting, preemptible_by_tier=other)], now, BUDGET,
                          lambda w: True)
        assert [c.job_id for _, c in got] == [low.job_id]
    # The record the scheduler publishes says which of its leases may be asked back.
    [record] = pool_stats(part, now, preemptible_of=lambda pool: Counter({1: 1}))
    assert record.preemptible_by_tier == ("1=1",)


def _asked(partition: int, at_ms: int, asked: int = 0, yielding: int = 0, pool: str = POOL) -> ev.PoolStats:
    return ev.PoolStats(pool=pool, partition=partition, at_ms=at_ms, queued=0, leased=1, oldest_wait_ms=0,
                        preempted_1m=asked, preempting=yielding)


def test_a_view_settles_after_another_partition_counts_a_new_request() -> None:
    """The race: the other instance asked two leases, on its partitions 0 and 2; this one reads partition 0's
    new record first and would spend the budget's last unit before partition 2's arrives."""
    from spotreel.services.scheduler.preempting import SETTLE_S, PoolStatsView
    from spotreel.config.settings import Settings

    now = [100.0]
    view = PoolStatsView(Settings(), monotonic=lambda: now[0])
    view.apply(_asked(0, T0))
    view.apply(_asked(2, T0))
    assert not view.settling(POOL, {1, 3})
    view.apply(_asked(0, T0 + 1000, asked=1, yielding=1))
    assert view.settling(POOL, {1, 3})
    assert not view.settling(POOL, {0, 2}), "its own partitions' records never hold an instance back"
    assert not view.settling("other-pool", {1, 3})
    now[0] += SETTLE_S / 2
    view.apply(_asked(2, T0 + 1000, asked=1, yielding=1))
    now[0] += SETTLE_S * 0.75
    assert view.settling(POOL, {1, 3}), "the window runs from the last new request read"
    now[0] += SETTLE_S
    assert not view.settling(POOL, {1, 3})
    # The same counts again (the next tick's record), fewer, or an older record read late: not a new request.
    view.apply(_asked(2, T0 + 2000, asked=1, yielding=1))
    view.apply(_asked(2, T0 + 3000, asked=1, yielding=0))
    view.apply(_asked(0, T0 + 500, asked=5, yielding=5))
    assert not view.settling(POOL, {1, 3})


def test_counts_new_request_compares_both_counts() -> None:
    from spotreel.services.scheduler.preempting import counts_new_request

    assert counts_new_request(None, _asked(0, T0, asked=1))
    assert not counts_new_request(None, _asked(0, T0))
    assert counts_new_request(_asked(0, T0, asked=1), _asked(0, T0 + 1, asked=1, yielding=1))
    assert counts_new_request(_asked(0, T0, asked=1, yielding=1), _asked(0, T0 + 1, asked=2, yielding=0))
    assert not counts_new_request(_asked(0, T0, asked=2, yielding=1), _asked(0, T0 + 1, asked=1, yielding=1))


def test_the_leases_preemption_weighs_are_kept_as_the_jobs_change() -> None:
    # What `running_of` gives (kept by PartitionState.observe) is what a walk of the held leases' states
    # gives, through a grant, a preemption request and the lease's end.
    low = leased_job(key="low", priority=1)
    part, states = _owner(low, leased_job(key="high", priority=7))

    def walked() -> list:
        return sorted((s.job_id, s.lease.epoch, s.priority, s.lease.granted_at_ms, s.preempt_requested)
                      for s in states.values() if s.lease is not None and s.status in Status.HOLDING_LEASE)

    def kept() -> list:
        return sorted((r.job_id, r.epoch, r.priority, r.started_ms, r.asked) for r in running_of(part, POOL))

    assert kept() == walked() and len(kept()) == 2
    before = low.s
    assert low.send(c.PreemptLease("p1", low.job_id, low.s.epoch, 9, "priority"))
    part.observe(before, low.s)
    states[low.job_id] = low.s
    assert kept() == walked() and (low.job_id, low.s.epoch, 1, low.s.lease.granted_at_ms, True) in kept()
    now = T0 + 30_000
    assert preemptible_by_tier(part, POOL, now, BUDGET) == Counter({7: 1})  # the asked one may not yield again
    before = low.s
    assert low.send(c.ReleaseLease("r1", low.job_id, low.s.epoch, low.s.lease.worker_id, "preempted"))
    part.observe(before, low.s)
    states[low.job_id] = low.s
    assert kept() == walked() and len(kept()) == 1 and low.job_id not in {r[0] for r in kept()}
