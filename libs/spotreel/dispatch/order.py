"""Where a RequestWork goes: partitions whose latest pool stats show queued work for the worker's models,
the one queueing the highest priority first (dispatch on a partition is by tier first too, and a worker
freed by a priority preemption must reach the waiting higher-tier job, not the job it just yielded), then
the one holding the tenant furthest below its fair share (`PoolStats.min_share`, the scheduler's view
of every tenant's usage over all partitions), then the most queued; then every other partition in a ring
that starts at the worker's own (`partition_for`), so workers that find no hint spread over the owners
instead of all asking partition 0. That order serves a draining worker's one request; when an idle worker
asks at all, and how many ask one partition at once, is `asking.py`'s."""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from spotreel.adapters.partitioning import partition_for


class PoolQueues:
    """The latest PoolStats of every partition (compacted `<prefix>.pool-stats`): queued jobs per pool, and
    the smallest fair share among the tenants queued there."""

    def __init__(self, on_change: Callable[[], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._queued: dict[str, dict[int, tuple[int, float | None]]] = defaultdict(dict)
        self._top: dict[str, dict[int, int]] = defaultdict(dict)  # highest queued priority per partition
        self._losses: dict[str, dict[int, tuple[int, float]]] = defaultdict(dict)
        self._idle: dict[str, dict[int, int]] = defaultdict(dict)  # idle workers each partition heard from
        # Bumped when what a partition shows (queued, share, top tier of any pool) changes, not on every
        # tick's identical record: a refusal from a partition holds until its version moves (asking.py).
        self._versions: dict[int, int] = defaultdict(int)
        # Called (on the recording thread, outside the lock) after a record that changed what it shows.
        self.on_change = on_change

    def record(self, stats: Any) -> None:
        queued = (stats.queued, getattr(stats, "min_share", None))
        top = top_tier(getattr(stats, "queued_by_tier", ()))
        with self._lock:
            pool, p = stats.pool, stats.partition
            changed = self._queued[pool].get(p) != queued or self._top[pool].get(p) != top
            self._queued[pool][p] = queued
            self._top[pool][p] = top
            self._losses[pool][p] = _exposure(stats)
            self._idle[pool][p] = max(0, int(getattr(stats, "idle_workers", 0) or 0))
            if changed:
                self._versions[p] += 1
        if changed and self.on_change is not None:
            self.on_change()

    def view(self, models: Iterable[str]) -> WorkView:
        """What the stats show for a worker of these models: the partitions with queued work in asking
        order (`partitions_with_work`), how many jobs each queues, every partition's version, the
        partitions that published stats at all, and the idle workers of these models the partitions heard
        from (summed over partitions: a worker heard by two counts twice; one not heard within the scheduler's
        60 s window, a worker just started, not at all)."""
        hinted = self.partitions_with_work(models)
        wanted = set(models)
        queued: dict[int, int] = defaultdict(int)
        idle = 0
        with self._lock:
            for pool, parts in self._queued.items():
                if pool.rsplit("@", 1)[0] in wanted:
                    for p, (n, _) in parts.items():
                        queued[p] += max(0, n)
                    idle += sum(self._idle[pool].values())
            versions = dict(self._versions)
            known = frozenset(p for parts in self._queued.values() for p in parts)
        return WorkView(tuple(hinted), dict(queued), versions, known, idle)

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


@dataclass(frozen=True)
class WorkView:
    """One look at the pool stats for one worker's models (PoolQueues.view)."""

    hinted: tuple[int, ...]  # partitions with queued work, in asking order
    queued: dict[int, int]  # queued jobs per partition
    versions: dict[int, int]  # per partition, bumped when what it shows changes
    known: frozenset[int]  # partitions that published stats at all
    idle: int = 0  # idle workers of these models heard from, summed over partitions (PoolStats.idle_workers)


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
