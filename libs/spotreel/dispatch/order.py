"""Where a RequestWork goes: partitions whose latest pool stats show queued work for the worker's models,
the one holding the tenant furthest below its fair share first (`PoolStats.min_share`, the scheduler's view
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

    def record(self, stats: Any) -> None:
        with self._lock:
            self._queued[stats.pool][stats.partition] = (stats.queued, getattr(stats, "min_share", None))

    def partitions_with_work(self, models: Iterable[str]) -> list[int]:
        """Partitions with queued work for any pool of these models (pools are `model@gpu`): the smallest
        share first (a partition without one, from a scheduler that does not publish it or whose tenants are
        all at their ceilings, after those with one), then the most queued."""
        wanted = set(models)
        totals: dict[int, int] = defaultdict(int)
        best: dict[int, float] = {}
        with self._lock:
            for pool, parts in self._queued.items():
                if pool.rsplit("@", 1)[0] in wanted:
                    for p, (n, min_share) in parts.items():
                        if n > 0:
                            totals[p] += n
                            if min_share is not None:
                                best[p] = min(best.get(p, math.inf), min_share)
        return sorted(totals, key=lambda p: (best.get(p, math.inf), -totals[p], p))


def request_order(worker_id: str, partitions: int, hinted: Iterable[int], skip: Iterable[int] = ()) -> list[int]:
    """Partitions to ask, in order: the hinted ones, then the ring from the worker's own; none in `skip`."""
    start = partition_for(worker_id, partitions)
    ring = [(start + i) % partitions for i in range(partitions)]
    skipped = set(skip)
    return list(dict.fromkeys(p for p in [*hinted, *ring] if p not in skipped and 0 <= p < partitions))
