"""The queue position the gateway tells (queueplace.py) from the pool-stats records the scheduler publishes
(poolstats.py) is the job's place in dispatch's own order (domain/queue_order.py), across partitions."""

from __future__ import annotations

import pytest

from spotreel.domain.job_choice import DispatchConfig, QueuedJob
from spotreel.domain.fairness import TenantPolicy, TenantUsage
from spotreel.domain.queue_order import dispatch_order
from spotreel.services.gateway.public import queueplace
from spotreel.services.scheduler.partition import PartitionState
from spotreel.services.scheduler.poolstats import pool_stats, standing

pytestmark = pytest.mark.unit

NOW = 1_000_000
COST = 60.0  # what the scheduler charges a grant before a run was measured, and the gateway's default


def test_positions_from_two_partitions_records_follow_dispatch_order() -> None:
    jobs = [QueuedJob(f"{t}{i}", t, prio, "m", "h100", NOW - 1000 + i, COST)
            for i, (t, prio) in enumerate([("a", 1), ("b", 1), ("a", 1), ("c", 5), ("b", 1), ("a", 1), ("c", 1)])]
    usage = {"a": TenantUsage("a", 300.0, 1), "b": TenantUsage("b", 110.0, 0), "c": TenantUsage("c", 0.0, 0)}
    policies = {"a": TenantPolicy(3.0), "b": TenantPolicy(1.0, max_in_flight=5), "c": TenantPolicy(1.0)}
    parts = [PartitionState(0), PartitionState(1)]
    for k, job in enumerate(jobs):
        parts[k % 2].index.add(job)
    records = [r for part in parts
               for r in pool_stats(part, NOW, standing_of=lambda t: standing(usage.get(t), policies.get(t)))]
    assert all(r.queued_by_tier_tenant and r.tenant_standing for r in records)
    queue = queueplace.groups(records, NOW, 30_000)
    order = [j.job_id for j in dispatch_order(jobs, usage, policies, NOW, DispatchConfig())]
    assert order[0] == "c3"  # the one higher tier first
    for job in jobs:
        own = sum(1 for j in jobs if (j.tenant, j.priority) == (job.tenant, job.priority) and j.enqueued_at_ms <
                  job.enqueued_at_ms)
        assert queueplace.position(queue, job.priority, job.tenant, own, COST) == order.index(job.job_id) + 1


def test_a_worker_whose_job_ended_counts_idle_until_its_next_lease() -> None:
    """A worker's completion (or failed attempt) frees it: the pool stats count it idle at once, so the ETA
    has a worker although its asking policy holds its next RequestWork back while nothing shows queued. A
    heartbeat means it is busy; a draining worker that finishes is not offered as idle."""
    from spotreel.services.scheduler.partition import WorkerSeen

    part = PartitionState(0)
    part.worker_asked("w1", WorkerSeen(NOW, False, ("m@h100",), False))
    part.worker_asked("w2", WorkerSeen(NOW, True, ("m@h100",), False))

    def idle() -> int:
        return sum(r.idle_workers for r in pool_stats(part, NOW + 2000) if r.pool == "m@h100")

    part.index.add(QueuedJob("j", "a", 1, "m", "h100", NOW, COST))  # a pool with a record
    assert idle() == 0
    part.seen_worker("w1", NOW + 1000, free=True)
    part.seen_worker("w2", NOW + 1000, free=True)
    assert idle() == 1 and part.workers["w1"].last_ms == NOW + 1000
    part.seen_worker("w1", NOW + 1500)  # a renewal: it holds a lease again
    assert idle() == 0
