"""Where a RequestWork goes: partitions whose latest pool stats show queued work for the worker's models,
the one queueing the highest priority first (dispatch on a partition is by tier first too, and a worker
freed by a priority preemption must reach the waiting higher-tier job, not the job it just yielded), then
the one holding the tenant furthest below its fair share (`PoolStats.min_share`, the scheduler's view
of every tenant's usage over all partitions), then the most queued; then every other partition in a ring
that starts at the worker's own (`partition_for`), so workers that find no hint spread over the owners
instead of all asking partition 0."""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from typing import Any, Iterable

from spotreel.adapters.partitioning import partition_for


class PoolQueues:
    """The latest PoolStats of every partition (compacted `<prefix>.pool-stats`): queued jobs per pool, and
    the smallest fair share among the tenants queued there."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queued: dict[str, dict[int, tuple[int, float | None]]] = defaultdict(dict)
        self._top: dict[str, dict[int, int]] = defaultdict(dict)  # highest queued priority per partition
        self._losses: dict[str, dict[int, tuple[int, float]]] = defaultdict(dict)

    def record(self, stats: Any) -> None:
        with self._lock:
            self._queued[stats.pool][stats.partition] = (stats.queued, getattr(stats, "min_share", None))
            self._top[stats.pool][stats.partition] = top_tier(getattr(stats, "queued_by_tier", ()))
            self._losses[stats.pool][stats.partition] = _exposure(stats)

    def lease_losses(self, pool: str) -> tuple[int, float]:
        """The pool's leases lost in the last hour and the leased seconds they were counted over, summed
        over partitions (each job's leases live in one partition); (0, 0.0) before any record."""
        with self._lock:
            parts = list(self._losses.get(pool, {}).values())
        return sum(n for n, _ in parts), sum(s for _, s in parts)

    def partitions_with_work(self, models: Iterable[str]) -> list[int]:
        """Partitions with queued work for any pool of these models (pools are `model@gpu`): the highest
        queued priority first, then the smallest share (a partition without one, from a scheduler that does
        not publish it or whose tenants are all at their ceilings, after those with one), then the most queued."""
        wanted = set(models)
        totals: dict[int, int] = defaultdict(int)
        best: dict[int, float] = {}
        top: dict[int, int] = {}
        with self._lock:
            for pool, parts in self._queued.items():
                if pool.rsplit("@", 1)[0] in wanted:
                    for p, (n, min_share) in parts.items():
                        if n > 0:
                            totals[p] += n
                            top[p] = max(top.get(p, -1), self._top[pool].get(p, -1))
                            if min_share is not None:
                                best[p] = min(best.get(p, math.inf), min_share)
        return sorted(totals, key=lambda p: (-top.get(p, -1), best.get(p, math.inf), -totals[p], p))


def _exposure(stats: Any) -> tuple[int, float]:
    """(losses, leased seconds) of one record; a record from a scheduler that does not report the leased
    time yet gives it back from the rate (losses per leased hour) when it can."""
    lost = int(getattr(stats, "lease_losses_1h", 0) or 0)
    leased_s = float(getattr(stats, "leased_seconds_1h", 0.0) or 0.0)
    rate = float(getattr(stats, "lease_loss_rate_per_hour", 0.0) or 0.0)
    if leased_s <= 0 and lost and rate > 0:
        leased_s = lost / rate * 3600.0
    return lost, leased_s


def top_tier(queued_by_tier: Any) -> int:
    """The highest priority among `priority=count` entries with a count above 0; -1 for none."""
    tiers = []
    for entry in queued_by_tier or ():
        tier, _, n = str(entry).partition("=")
        try:
            if int(n) > 0:
                tiers.append(int(tier))
        except ValueError:
            continue
    return max(tiers, default=-1)


def request_order(worker_id: str, partitions: int, hinted: Iterable[int], skip: Iterable[int] = ()) -> list[int]:
    """Partitions to ask, in order: the hinted ones, then the ring from the worker's own; none in `skip`."""
    start = partition_for(worker_id, partitions)
    ring = [(start + i) % partitions for i in range(partitions)]
    skipped = set(skip)
    return list(dict.fromkeys(p for p in [*hinted, *ring] if p not in skipped and 0 <= p < partitions))
