"""Where a queued job stands: the order in which dispatch would hand out a pool's queued jobs.

A queue position (the 202 answer, `GET /v1/videos/{id}`, the SSE stream) and the ETA built on it are only
honest if they follow the rule dispatch applies (``job_choice.py``: overdue first, then strict tiers across
the pool, then the tenant furthest below its fair share, then age). That rule picks one job per request and
charges the tenant for it (``TenantAccount.on_dispatch``: in flight + 1, usage + the job's estimate), so the
order of a whole queue is what repeated requests would take, each charging as it goes:

- ``dispatch_order``: that sequence, exact, from the jobs themselves (what a partition's owner holds). The
  first job is the one ``job_choice.choose`` picks for a worker of the pool that declares no warm model.
  Jobs of a tenant that reaches its in-flight ceiling come last: no grant takes them until a lease ends.
- ``jobs_ahead``: the same walk from counts, for a reader that holds no jobs (the gateway, from the
  pool-stats records of every partition): per tier and tenant how many are queued, the tenant's share,
  weight and room under its ceiling, and how many of the job's own tenant and tier are older. Equal shares
  are broken against the job (dispatch breaks them by the older job, which counts do not show), so it never
  places a job earlier than ``dispatch_order`` does, and differs only by such ties
  (tests/unit/test_queue_order.py). Overdue jobs and graded aging (off by default) are not in the counts.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from typing import Any
from dataclasses import dataclass, replace

from spotreel.domain.job_choice import DispatchConfig, DispatchIndex, QueuedJob, _select
from spotreel.domain.fairness import TenantPolicy, TenantUsage
from spotreel.domain.pools import WorkerOffer


def dispatch_order(jobs: Iterable[QueuedJob], usage: Mapping[str, TenantUsage],
                   policies: Mapping[str, TenantPolicy], now_ms: int,
                   config: DispatchConfig | None = None) -> list[QueuedJob]:
    """The jobs of one pool in the order successive grants would take them at `now_ms`. O(n x queues)."""
    config = config or DispatchConfig()
    jobs = list(jobs)
    if not jobs:
        return []
    pools = {j.pool for j in jobs}
    if len(pools) != 1:
        raise ValueError(f"dispatch_order orders one pool, got {sorted(map(str, pools))}")
    pool = jobs[0].pool
    worker = WorkerOffer("queue-order", pool.gpu_type, frozenset({pool.model}))
    index = DispatchIndex(jobs)
    usage = dict(usage)
    order: list[QueuedJob] = []
    while len(index):
        job = _select(worker, index.heads(worker), usage, policies, now_ms, config)
        if job is None:
            break  # every tenant left is at its in-flight ceiling
        index.discard(job.job_id)
        held = usage.get(job.tenant) or TenantUsage(job.tenant)
        usage[job.tenant] = TenantUsage(job.tenant, held.gpu_seconds + job.est_gpu_seconds, held.in_flight + 1)
        order.append(job)
    if len(index):
        # What waits for its tenant's leases to end, in the order it would go then.
        rest = list(index._jobs.values())  # noqa: SLF001 - the domain's own index
        lifted = {t: replace(p, max_in_flight=None) for t, p in policies.items()}
        order += dispatch_order(rest, usage, lifted, now_ms, replace(config, default_policy=replace(
            config.default_policy, max_in_flight=None)))
    return order


@dataclass(frozen=True)
class QueueGroup:
    """A tenant's queued jobs of one tier in one pool (summed over partitions), with what dispatch weighs:
    the tenant's usage (GPU-seconds over all partitions, as ``fairness.TenantUsage``), weight (its share is
    usage / weight), and room under its in-flight ceiling (None: no ceiling)."""

    tier: int
    tenant: str
    count: int
    usage: float
    weight: float
    room: int | None = None


def jobs_ahead(tier: int, tenant: str, own_ahead: int, groups: Iterable[QueueGroup],
               cost_gpu_seconds: float) -> int | None:
    """How many queued jobs dispatch hands out before a job of `tier` and `tenant` that has `own_ahead`
    older jobs of its tenant and tier in the pool; `groups` describe the pool's queue (the job itself may be
    counted in its group or not), every grant charged `cost_gpu_seconds`. None: the job waits for its
    tenant's leases to end (the tenant reaches its ceiling before the job's turn)."""
    if own_ahead < 0 or cost_gpu_seconds < 0:
        raise ValueError("own_ahead and cost_gpu_seconds must be >= 0")
    merged: dict[tuple[int, str], QueueGroup] = {}
    # The tenants' state while the walk charges them: usage, weight, room (from any of their groups, also one
    # with no job, which is how a caller names the state of a tenant whose first job this is). Shares are
    # computed as dispatch computes them (usage / weight, never accumulated), so ties fall alike.
    state: dict[str, list[Any]] = {}
    for g in groups:
        state.setdefault(g.tenant, [g.usage, g.weight, g.room])
        if g.count <= 0 or g.tier < tier:
            continue
        held = merged.get((g.tier, g.tenant))
        merged[(g.tier, g.tenant)] = g if held is None else replace(held, count=held.count + g.count)
    state.setdefault(tenant, [0.0, 1.0, None])
    left = {key: g.count for key, g in merged.items()}
    left[(tier, tenant)] = max(left.get((tier, tenant), 0), own_ahead + 1)
    ahead = 0
    for t in sorted({k[0] for k in left}, reverse=True):
        # One tier: the tenant with the smallest share and room goes next; ties against the job's tenant.
        heap = [(state[name][0] / state[name][1], name == tenant, name) for (tt, name) in left if tt == t]
        heapq.heapify(heap)
        target = own_ahead + 1 if t == tier else None
        while heap:
            _, _, name = heapq.heappop(heap)
            s = state[name]
            if s[2] is not None and s[2] <= 0:
                if name == tenant and target is not None:
                    return None
                continue  # at its ceiling: passed over until a lease ends
            if name == tenant and target is not None:
                target -= 1
                if target == 0:
                    return ahead
            ahead += 1
            s[0] += cost_gpu_seconds
            if s[2] is not None:
                s[2] -= 1
            left[(t, name)] -= 1
            if left[(t, name)] > 0:
                heapq.heappush(heap, (s[0] / s[1], name == tenant, name))
    return ahead
