"""Per-partition pool statistics for the compacted pool-stats topic (admission control, ETA, capacity).

One record per (pool, partition), key `pool/partition`; the fields are described on `events.PoolStats`
and in README.md. Everything here is derived from what the partition's owner has seen since it took
the partition (means and rates restart after a rebalance; the counts come from the table)."""

from __future__ import annotations

from collections import Counter
from typing import Callable

from spotreel.domain import events as ev
from spotreel.domain.fairness import TenantPolicy, TenantUsage, share
from spotreel.domain.quotas import has_in_flight_room
from spotreel.domain.ids import pool_key

from spotreel.services.scheduler.partition import PartitionState
from spotreel.services.scheduler.preempting import asked_1m

HOUR_MS = 3_600_000


def _mean(values) -> float:
    return sum(values) / len(values) if values else 0.0


def lease_losses(part: PartitionState, pool: str, now_ms: int) -> tuple[int, float, float]:
    """Leases of `pool` lost in the last hour, losses per hour of leased time in that hour (ended leases
    and the ones still held), and that leased time in seconds."""
    since = now_ms - HOUR_MS
    lost, leased_ms = 0, 0
    for p, start, end, was_lost in part.ended_leases:
        if p != pool or end < since:
            continue
        leased_ms += end - max(start, since)
        lost += was_lost
    for job_id, holder_pool in part.holders.items():
        if holder_pool == pool and job_id in part.leased_at:
            leased_ms += max(0, now_ms - max(part.leased_at[job_id], since))
    rate = lost / (leased_ms / HOUR_MS) if lost and leased_ms > 0 else 0.0
    return lost, rate, leased_ms / 1000


def share_if_room(usage: TenantUsage | None, policy: TenantPolicy | None) -> float | None:
    """A tenant's fair share (usage / weight), or None when it is at its in-flight ceiling (dispatch would
    pass over its jobs)."""
    policy = policy or TenantPolicy()
    if not has_in_flight_room(usage.in_flight if usage else 0, policy.max_in_flight):
        return None
    return share(usage, policy)


def standing(usage: TenantUsage | None, policy: TenantPolicy | None) -> tuple[float, float, int | None]:
    """What dispatch weighs a tenant by: its usage over all partitions, its weight, and the leases it may
    still take under its in-flight ceiling (None: no ceiling)."""
    policy = policy or TenantPolicy()
    held = usage.in_flight if usage else 0
    room = None if policy.max_in_flight is None else max(0, policy.max_in_flight - held)
    return (usage.gpu_seconds if usage else 0.0), policy.weight, room


def pool_stats(part: PartitionState, now_ms: int,
               share_of: Callable[[str], float | None] = lambda tenant: None,
               standing_of: Callable[[str], tuple[float, float, int | None]] | None = None,
               preemptible_of: Callable[[str], Counter] | None = None) -> list[ev.PoolStats]:
    """`share_of(tenant)`: the tenant's fair share over all partitions, None if it may get no lease now;
    `standing_of(tenant)`: `standing` above (None: the records carry no `tenant_standing`);
    `preemptible_of(pool)`: this partition's leases of the pool that may be asked back now, by tier.
    The worker counts are of the workers the partition remembers (`PartitionState.workers`): those heard
    from within WORKER_WINDOW_MS when `forget_workers(now_ms)` ran just before, as every caller does."""
    by_pool: dict[str, list] = {}
    for job in list(part.index._jobs.values()):  # noqa: SLF001 - a read-only walk of the hint index
        by_pool.setdefault(pool_key(job.model, job.gpu_type), []).append(job)
    # A pool whose jobs were all queued, leased and ended between two ticks shows in none of the counts;
    # its measured run time (the ETA's generation time) would never be published: its runs name it too.
    pools = (set(by_pool) | {p for p, n in part.leased_by_pool.items() if n > 0} | part.known_pools
             | set(part.run_ms_by_pool))
    part.known_pools |= pools
    mean_cp = _mean(part.checkpoint_gaps_ms)
    out = []
    for pool in sorted(pools):
        jobs = by_pool.get(pool, [])
        tiers = Counter(j.priority for j in jobs)
        tenants = Counter(j.tenant for j in jobs)
        groups = Counter((j.priority, j.tenant) for j in jobs)
        standings = []
        if standing_of is not None:
            for tenant in sorted(tenants):
                used, weight, room = standing_of(tenant)
                standings.append(f"{tenant}={used!r}/{weight!r}/{'' if room is None else room}")
        shares = [x for x in map(share_of, tenants) if x is not None]
        oldest = min((j.enqueued_at_ms for j in jobs), default=now_ms)
        holding = {part.workers_of.get(j) for j, p in part.holders.items() if p == pool} - {None}
        lost, rate, leased_s = lease_losses(part, pool, now_ms)
        out.append(ev.PoolStats(
            pool=pool, partition=part.partition, at_ms=now_ms, queued=len(jobs),
            leased=part.leased_by_pool.get(pool, 0), oldest_wait_ms=max(0, now_ms - oldest),
            queued_by_tier=tuple(f"{k}={v}" for k, v in sorted(tiers.items())),
            queued_by_tenant=tuple(f"{k}={v}" for k, v in sorted(tenants.items())),
            idle_workers=part.workers.idle_count(pool),
            warm_idle_workers=part.workers.warm_idle_in(pool),
            draining_workers=part.workers.draining_in(pool),
            mean_run_ms=_mean(part.run_ms_by_pool.get(pool, ())),
            mean_checkpoint_interval_ms=mean_cp,
            active_workers=len(holding),
            mean_checkpoint_ms=_mean(part.checkpoint_ms_by_pool.get(pool, ())),
            lease_losses_1h=lost, lease_loss_rate_per_hour=rate, min_share=min(shares, default=None),
            leased_seconds_1h=leased_s,
            preempting=sum(1 for p in part.yielding.values() if p == pool),
            preempted_1m=len(asked_1m(part, pool, now_ms)),
            queued_by_tier_tenant=tuple(f"{k}/{t}={v}" for (k, t), v in sorted(groups.items())),
            tenant_standing=tuple(standings),
            preemptible_by_tier=tuple(f"{k}={v}" for k, v in sorted((preemptible_of(pool) if preemptible_of
                                                                     else Counter()).items()) if v > 0)))
    return out
