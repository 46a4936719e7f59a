"""Per-partition pool statistics for the compacted pool-stats topic (admission control, ETA, capacity)."""

from __future__ import annotations

from collections import Counter

from spotreel.domain import events as ev
from spotreel.domain.ids import pool_key

from spotreel.services.scheduler.partition import PartitionState

# A worker that asked within this window counts as present (idle if it holds nothing, or draining).
WORKER_WINDOW_MS = 60_000


def pool_stats(part: PartitionState, now_ms: int) -> list[ev.PoolStats]:
    by_pool: dict[str, list] = {}
    for job in list(part.index._jobs.values()):  # noqa: SLF001 - a read-only walk of the hint index
        by_pool.setdefault(pool_key(job.model, job.gpu_type), []).append(job)
    pools = set(by_pool) | {p for p, n in part.leased_by_pool.items() if n > 0} | part.known_pools
    part.known_pools |= pools
    recent = [w for w in part.workers.values() if now_ms - w.last_ms <= WORKER_WINDOW_MS]
    mean_run = sum(part.run_ms) / len(part.run_ms) if part.run_ms else 0.0
    mean_cp = sum(part.checkpoint_gaps_ms) / len(part.checkpoint_gaps_ms) if part.checkpoint_gaps_ms else 0.0
    out = []
    for pool in sorted(pools):
        jobs = by_pool.get(pool, [])
        tiers = Counter(j.priority for j in jobs)
        tenants = Counter(j.tenant for j in jobs)
        oldest = min((j.enqueued_at_ms for j in jobs), default=now_ms)
        out.append(ev.PoolStats(
            pool=pool, partition=part.partition, at_ms=now_ms, queued=len(jobs),
            leased=part.leased_by_pool.get(pool, 0), oldest_wait_ms=max(0, now_ms - oldest),
            queued_by_tier=tuple(f"{k}={v}" for k, v in sorted(tiers.items())),
            queued_by_tenant=tuple(f"{k}={v}" for k, v in sorted(tenants.items())),
            idle_workers=sum(1 for w in recent if w.idle and not w.draining),
            draining_workers=sum(1 for w in recent if w.draining),
            mean_run_ms=mean_run, mean_checkpoint_interval_ms=mean_cp))
    return out
