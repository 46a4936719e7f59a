"""A job's queue position in the order dispatch hands out work, from the pool-stats records of every partition.

Dispatch (domain/job_choice.py) serves a pool highest tier first, then the tenant furthest below its fair
share (usage / weight over all partitions), then the oldest job, charging each grant to its tenant. The
gateway holds no jobs, so it walks that order over counts (`domain.queue_order.jobs_ahead`): each
partition's owner publishes, per pool, its queued jobs per tier and tenant (`queued_by_tier_tenant`) and
every such tenant's usage, weight and room under its in-flight ceiling (`tenant_standing`). This module sums
the fresh records and asks the walk how many jobs go before the one in question:

- a new job (the 202): all of its tenant's queued jobs of its tier are older;
- a queued job (GET /v1/videos/{id}, the SSE stream): its tenant's jobs of its tier queued before it, counted
  as the tenant's queued jobs of that tier minus those of the same priority submitted after it (the read
  model's list of the tenant's queued jobs, newest first, read until the job; any pool).

Each grant is charged the pool's measured mean generation time (60 s before one is measured, as the
scheduler charges a held lease). What it cannot see: jobs overdue past the starvation bound (they go first),
a tie on share (counted against the job), the order among partitions within one stats tick, and the read
model's and pool-stats' lag (a second or two). A tenant with no queued job in the pool is weighed by its
usage from the tenant-usage topic and its plan's weight (a weight override set with `spotreel tenant set`
is not seen here). Records without the counts (an older scheduler) give None: the caller falls back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from spotreel.domain import plans
from spotreel.domain.queue_order import QueueGroup, jobs_ahead

DEFAULT_COST_S = 60.0
# How many of the tenant's queued jobs a GET reads at most to find those submitted after the job.
LIST_LIMIT = 200


def _standing(entry: str) -> tuple[str, tuple[float, float, int | None]] | None:
    tenant, _, rest = str(entry).rpartition("=")
    try:
        used, weight, room = rest.split("/")
        return tenant, (float(used), float(weight), int(room) if room else None)
    except ValueError:
        return None


def groups(records: Iterable[Any], now_ms: int, stale_ms: int) -> list[QueueGroup] | None:
    """The pool's queue as (tier, tenant) groups summed over the fresh records; None when no fresh record
    carries the counts."""
    fresh = sorted((r for r in records if now_ms - r.at_ms <= stale_ms), key=lambda r: r.at_ms)
    if not any(getattr(r, "queued_by_tier_tenant", None) for r in fresh):
        return None
    counts: dict[tuple[int, str], int] = {}
    standing: dict[str, tuple[float, float, int | None]] = {}
    for r in fresh:  # oldest first: the newest record's standing of a tenant wins
        for entry in getattr(r, "queued_by_tier_tenant", ()) or ():
            key, _, n = str(entry).rpartition("=")
            tier, _, tenant = key.partition("/")
            try:
                counts[(int(tier), tenant)] = counts.get((int(tier), tenant), 0) + int(n)
            except ValueError:
                continue
        for entry in getattr(r, "tenant_standing", ()) or ():
            if (parsed := _standing(entry)) is not None:
                standing[parsed[0]] = parsed[1]
    out = []
    for (tier, tenant), n in counts.items():
        used, weight, room = standing.get(tenant, (0.0, 1.0, None))
        out.append(QueueGroup(tier, tenant, n, used, weight, room))
    return out


def own_count(queue: list[QueueGroup], tenant: str, tier: int) -> int:
    return sum(g.count for g in queue if g.tenant == tenant and g.tier == tier)


def position(queue: list[QueueGroup], tier: int, tenant: str, own_ahead: int, cost_s: float | None,
             usage_s: float | None = None, plan: str | None = None) -> int | None:
    """The 1-based position in dispatch's order, None when the job waits for its tenant's leases to end.
    `usage_s`, `plan`: the tenant's usage and plan, for a tenant with no queued job in the pool."""
    extra = []
    if not any(g.tenant == tenant for g in queue):
        weight = plans.PLANS[plan].weight if plan in plans.PLANS else plans.CUSTOM.weight
        extra = [QueueGroup(tier, tenant, 0, usage_s or 0.0, weight)]
    ahead = jobs_ahead(tier, tenant, max(0, own_ahead), [*queue, *extra], cost_s or DEFAULT_COST_S)
    return None if ahead is None else ahead + 1


async def newer_of_tier(reads: Any, tenant: str, job_id: str, priority: int) -> int:
    """The tenant's queued jobs of `priority` submitted after `job_id` (the read model's list, newest first,
    read until the job or LIST_LIMIT rows)."""
    page = await reads.list_jobs(tenant, "queued", LIST_LIMIT, None)
    newer = 0
    for item in page.items:
        if item.job_id == job_id:
            break
        newer += item.priority == priority
    return newer
