"""The queue order the position and ETA follow (domain/queue_order.py): it is dispatch's own order, and the
count-based walk the gateway uses never places a job earlier than it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.domain.aging import AgingPolicy
from spotreel.domain.job_choice import DispatchConfig, QueuedJob, choose
from spotreel.domain.fairness import TenantPolicy, TenantUsage
from spotreel.domain.pools import WorkerOffer
from spotreel.domain.queue_order import QueueGroup, dispatch_order, jobs_ahead
from tests.harness.hypothesis_profiles import examples

pytestmark = pytest.mark.unit

TENANTS = ("a", "b", "c")
COST = 2.0
NO_OVERDUE = DispatchConfig(aging=AgingPolicy(step_ms=None, max_wait_ms=None))
WORKER = WorkerOffer("w", "h100", frozenset({"m"}))


def q(job_id: str, tenant: str, priority: int, at: int) -> QueuedJob:
    return QueuedJob(job_id, tenant, priority, "m", "h100", at, COST)


jobs_st = st.lists(st.tuples(st.sampled_from(TENANTS), st.integers(0, 3), st.integers(0, 20)),
                   min_size=1, max_size=20).map(
    lambda rows: [q(f"j{i:02d}", t, p, at) for i, (t, p, at) in enumerate(rows)])
usage_st = st.fixed_dictionaries({t: st.builds(TenantUsage, st.just(t), st.sampled_from([0.0, 1.0, 2.0, 5.0]),
                                               st.integers(0, 2)) for t in TENANTS})
policy_st = st.fixed_dictionaries({t: st.builds(TenantPolicy, st.sampled_from([1.0, 2.0, 3.0]),
                                                st.sampled_from([None, None, 2, 3, 4])) for t in TENANTS})


def groups_of(jobs, usage, policies) -> list[QueueGroup]:
    counts: dict[tuple[int, str], int] = {}
    for j in jobs:
        counts[(j.priority, j.tenant)] = counts.get((j.priority, j.tenant), 0) + 1
    out = []
    for (tier, tenant), n in counts.items():
        p = policies.get(tenant, TenantPolicy())
        room = None if p.max_in_flight is None else p.max_in_flight - usage[tenant].in_flight
        out.append(QueueGroup(tier, tenant, n, usage[tenant].gpu_seconds, p.weight, room))
    return out


def test_tier_first_then_share_then_age():
    jobs = [q("b-old", "b", 1, 0), q("a-1", "a", 1, 5), q("a-2", "a", 1, 6), q("c-hi", "c", 5, 9)]
    usage = {"a": TenantUsage("a", 0.0), "b": TenantUsage("b", 3.0), "c": TenantUsage("c", 100.0)}
    order = [j.job_id for j in dispatch_order(jobs, usage, {}, 10, NO_OVERDUE)]
    # c's higher tier first whatever its usage; then a (share 0) twice until its share passes b's 3.0.
    assert order == ["c-hi", "a-1", "a-2", "b-old"]
    groups = groups_of(jobs, usage, {})
    assert jobs_ahead(5, "c", 0, groups, COST) == 0
    assert jobs_ahead(1, "a", 1, groups, COST) == 2
    assert jobs_ahead(1, "b", 0, groups, COST) == 3
    # A new job of a (the 202): behind its own two, and behind b's once a's share passes b's.
    assert jobs_ahead(1, "a", 2, groups, COST) == 4


def test_a_tenant_at_its_ceiling_waits_for_its_leases():
    jobs = [q("a-1", "a", 1, 0), q("b-1", "b", 1, 1)]
    usage = {"a": TenantUsage("a", 0.0, 2), "b": TenantUsage("b", 9.0)}
    policies = {"a": TenantPolicy(1.0, 2)}
    assert [j.job_id for j in dispatch_order(jobs, usage, policies, 10, NO_OVERDUE)] == ["b-1", "a-1"]
    assert jobs_ahead(1, "a", 0, groups_of(jobs, usage, policies), COST) is None
    assert jobs_ahead(1, "b", 0, groups_of(jobs, usage, policies), COST) == 0


@settings(max_examples=examples(400), deadline=None)
@given(jobs_st, usage_st, policy_st, st.integers(0, 30))
def test_the_first_in_order_is_what_dispatch_picks(jobs, usage, policies, now):
    config = DispatchConfig()  # the scheduler's: overdue after 30 min, no graded aging
    order = dispatch_order(jobs, usage, policies, now, config)
    assert sorted(j.job_id for j in order) == sorted(j.job_id for j in jobs)
    picked = choose(WORKER, jobs, usage, policies, now, config)
    if picked is not None:
        assert order[0].job_id == picked


@settings(max_examples=examples(400), deadline=None)
@given(jobs_st, usage_st, st.fixed_dictionaries({t: st.sampled_from([1.0, 2.0, 3.0]) for t in TENANTS}))
def test_a_higher_tier_is_never_behind_a_lower_one(jobs, usage, weights):
    policies = {t: TenantPolicy(w) for t, w in weights.items()}
    tiers = [j.priority for j in dispatch_order(jobs, usage, policies, 0, DispatchConfig())]
    assert tiers == sorted(tiers, reverse=True)


@settings(max_examples=examples(400), deadline=None)
@given(jobs_st, usage_st, policy_st)
def test_counts_never_place_a_job_earlier_than_dispatch_does(jobs, usage, policies):
    order = dispatch_order(jobs, usage, policies, 0, NO_OVERDUE)
    groups = groups_of(jobs, usage, policies)
    tenants = {j.tenant for j in jobs}
    for position, job in enumerate(order):
        own = sum(1 for j in jobs if (j.tenant, j.priority) == (job.tenant, job.priority)
                  and (j.enqueued_at_ms, j.job_id) < (job.enqueued_at_ms, job.job_id))
        counted = jobs_ahead(job.priority, job.tenant, own, groups, COST)
        if counted is None:
            continue  # its tenant reaches its ceiling first: the exact order puts it in the tail
        assert counted >= position
        if len(tenants) == 1:
            assert counted == position
