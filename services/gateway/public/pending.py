"""Why is my job pending? The `pending_reason` of GET /v1/videos/{id} and the SSE stream.

The gateway does not run the scheduler's dispatch, so it explains a waiting job from what it can read:
the job's read-model row (status, run_at, attempts, priority), the pool's latest pool-stats records over
all partitions (queued jobs per tier, busy and idle workers) and, for the tenant's in-flight ceiling, the
tenant's own leased/running jobs in the read model. In order:

- `accepted`: the scheduler has not recorded the job yet;
- `paused`: a pause holds it (resume to continue);
- `parents_unfinished`: it waits for its parent jobs;
- `retry_backoff` / `run_at_future`: not runnable before `run_at` (a failed attempt's backoff, or the
  submitted run_at);
- `tenant_at_ceiling`: the tenant holds `max_in_flight` leases already; dispatch passes over its jobs;
- `behind_higher_tier`: N jobs of a higher priority are queued in the pool (over all partitions and
  tenants): dispatch serves tiers strictly, whoever's they are, and a full pool may preempt lower-tier
  work for them (scheduler README);
- `waiting_for_worker`: none of the above: the next worker of pool X takes it in dispatch's order.

A queued job's reason also carries `queue_position` (1-based) and `estimated_wait_seconds`: its place in
dispatch's order (tier, then the tenants' fair shares, then age) and the wait that follows, as the 202
computes them (admission.py, queueplace.py); null, with `estimate_unavailable_reason`, when they cannot be
told (no statistics, no measured generation time, no worker, or the tenant at its ceiling).

What it cannot know: an overdue job (past the starvation bound) or a tie on share that the pool-stats
counts do not show, whether the pool-stats it reads are fresh to the second (they are published every
second; a missing or stale pool gives `pool_stats: null`), and the in-flight ceiling the scheduler
enforces is read from the tenant's plan as the gateway cached it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from spotreel.services.gateway.public import queueplace
from spotreel.services.gateway.deps import Deps, Tenant
from spotreel.readmodel.jobs import JobView

RUN_AT_STATUSES = frozenset({"scheduled"})
NOT_PENDING = frozenset({"leased", "running", "succeeded", "failed", "cancelled", "dead_lettered"})


@dataclass(frozen=True)
class PoolQueue:
    """A pool over all partitions, from the fresh pool-stats records."""

    by_tier: dict[int, int]
    busy_workers: int
    idle_workers: int


def pool_queue(records: Iterable[Any], now_ms: int, stale_ms: int) -> PoolQueue | None:
    fresh = [r for r in records if now_ms - r.at_ms <= stale_ms]
    if not fresh:
        return None
    tiers: Counter = Counter()
    for r in fresh:
        for entry in getattr(r, "queued_by_tier", ()) or ():
            tier, _, n = str(entry).partition("=")
            try:
                tiers[int(tier)] += int(n)
            except ValueError:
                continue
    # An idle worker asks every partition in turn, so each counts it: the largest count (poolview.py).
    return PoolQueue(dict(tiers), int(sum(r.leased for r in fresh)),
                     int(max(getattr(r, "idle_workers", 0) or 0 for r in fresh)))


def pending_reason(job: JobView | None, status: str, now_ms: int, pool: PoolQueue | None,
                   tenant_leases: int | None = None, max_in_flight: int | None = None,
                   run_at_iso: str | None = None) -> dict[str, Any] | None:
    """The reason the job does not run yet, or None when it holds a lease or is terminal. `job` None: only
    the gateway's claim is known (status `accepted`)."""
    if status in NOT_PENDING:
        return None
    if job is None or status == "accepted":
        return {"code": "accepted", "message": "accepted; the scheduler has not recorded the job yet"}
    if status == "paused":
        return {"code": "paused", "message": "paused; resume it to queue it again"}
    if status == "waiting":
        return {"code": "parents_unfinished", "message": "waiting for its parent jobs to finish"}
    if status in RUN_AT_STATUSES and job.run_at_ms is not None and job.run_at_ms > now_ms:
        if job.attempt > 0 and job.error:
            return {"code": "retry_backoff", "run_at": run_at_iso,
                    "message": f"attempt {job.attempt} failed ({job.error}); retried after its backoff"}
        return {"code": "run_at_future", "run_at": run_at_iso, "message": "not runnable before its run_at"}
    if status != "queued":
        return {"code": status, "message": f"status {status}"}
    if max_in_flight is not None and tenant_leases is not None and tenant_leases >= max_in_flight:
        return {"code": "tenant_at_ceiling", "tenant_leases": tenant_leases, "max_in_flight": max_in_flight,
                "message": f"the tenant holds {tenant_leases} leases, its plan's max_in_flight is {max_in_flight}"}
    if pool is None:
        return {"code": "waiting_for_worker", "pool": job.pool, "pool_stats": None,
                "message": f"waiting for a worker of pool {job.pool} (no recent pool statistics)"}
    higher = sum(n for tier, n in pool.by_tier.items() if tier > job.priority)
    stats = {"queued_by_tier": {str(t): n for t, n in sorted(pool.by_tier.items(), reverse=True)},
             "busy_workers": pool.busy_workers, "idle_workers": pool.idle_workers}
    if higher > 0:
        return {"code": "behind_higher_tier", "pool": job.pool, "higher_tier_jobs": higher, "pool_stats": stats,
                "message": f"{higher} job(s) of a higher priority are queued in pool {job.pool} and go first, "
                           f"whoever's they are"}
    return {"code": "waiting_for_worker", "pool": job.pool, "pool_stats": stats,
            "message": f"waiting for a worker of pool {job.pool} ({pool.busy_workers} busy, {pool.idle_workers} "
                       f"idle); among jobs of its priority, the tenants' fair shares and then age decide"}


# Pool-stats records older than this are not trusted (their scheduler stopped publishing).
STALE_MS = 30_000


async def tenant_leases(deps: Deps, tenant: Tenant) -> int | None:
    """The tenant's leased + running jobs in the read model, counted up to its ceiling (None: no ceiling)."""
    if tenant.max_in_flight is None:
        return None
    n = 0
    for held in ("leased", "running"):  # bounded: the ceiling is all it needs to see
        n += len((await deps.reads.list_jobs(tenant.tenant_id, held, max(1, tenant.max_in_flight), None)).items)
    return n


async def explain(deps: Deps, tenant: Tenant, found: Any, now_ms: int, run_at_iso: str | None,
                  leases: Callable[[], Awaitable[int | None]] | None = None, admission: Any = None,
                  newer: Callable[[], Awaitable[int]] | None = None) -> dict[str, Any] | None:
    """`pending_reason` for a job (JobView) or a claim, from the pool-stats view and the read model.
    `leases`: how to count the tenant's leases (the SSE stream passes a cached count); default: read now.
    `admission`: where a queued job's position and wait come from (none without it); `newer`: how to count the
    tenant's queued jobs of the job's priority submitted after it (the stream caches it); default: read now."""
    job = found if isinstance(found, JobView) else None
    status = job.status if job is not None else "accepted"
    if status in NOT_PENDING:
        return None
    records = getattr(deps.pools, "records", None)
    pool = pool_queue(records(job.pool), now_ms, STALE_MS) if job is not None and records is not None else None
    held = None
    if job is not None and status == "queued" and tenant.max_in_flight is not None:
        held = await (leases() if leases is not None else tenant_leases(deps, tenant))
    reason = pending_reason(job, status, now_ms, pool, held, tenant.max_in_flight, run_at_iso)
    if reason is not None and admission is not None and reason["code"] in PLACED:
        await place(reason, deps, tenant, job, admission, newer)
    return reason


# The reasons of a job that waits only for its turn: they say where it stands.
PLACED = frozenset({"behind_higher_tier", "waiting_for_worker"})


async def place(reason: dict[str, Any], deps: Deps, tenant: Tenant, job: JobView, admission: Any,
                newer: Callable[[], Awaitable[int]] | None) -> None:
    """Add the job's queue position and wait in dispatch's order to `reason`."""
    records = getattr(deps.pools, "records", None)
    queue = queueplace.groups(records(job.pool), deps.clock_ms(), STALE_MS) if records is not None else None
    own_ahead = None
    if queue is not None:
        try:
            after = await (newer() if newer is not None else
                           queueplace.newer_of_tier(deps.reads, tenant.tenant_id, job.job_id, job.priority))
        except Exception:  # noqa: BLE001 - a position is advice: without the list, the job counts as the newest
            after = 0
        own_ahead = max(0, queueplace.own_count(queue, tenant.tenant_id, job.priority) - 1 - after)
    est = await admission.estimate(job.pool, tenant, job.priority, own_ahead if own_ahead is not None else 0)
    reason["queue_position"], reason["estimated_wait_seconds"] = est.queue_position, est.wait_seconds
    if est.wait_seconds is None:
        reason["estimate_unavailable_reason"] = est.reason
