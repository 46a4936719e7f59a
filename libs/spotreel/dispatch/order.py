"""Where a RequestWork goes: partitions whose latest pool stats show queued work for the worker's models
(most first), then every other partition in a ring that starts at the worker's own (`partition_for`), so
workers that find no hint spread over the owners instead of all asking partition 0."""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any, Iterable

from spotreel.adapters.partitioning import partition_for


class PoolQueues:
    """The latest PoolStats of every partition (compacted `<prefix>.pool-stats`): queued jobs per pool."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queued: dict[str, dict[int, int]] = defaultdict(dict)

    def record(self, stats: Any) -> None:
        with self._lock:
            self._queued[stats.pool][stats.partition] = stats.queued

    def partitions_with_work(self, models: Iterable[str]) -> list[int]:
        """Partitions with queued work for any pool of these models (pools are `model@gpu`), most first."""
        wanted = set(models)
        totals: dict[int, int] = defaultdict(int)
        with self._lock:
            for pool, parts in self._queued.items():
                if pool.rsplit("@", 1)[0] in wanted:
                    for p, n in parts.items():
                        if n > 0:
                            totals[p] += n
        return sorted(totals, key=lambda p: (-totals[p], p))


def request_order(worker_id: str, partitions: int, hinted: Iterable[int], skip: Iterable[int] = ()) -> list[int]:
    """Partitions to ask, in order: the hinted ones, then the ring from the worker's own; none in `skip`."""
    start = partition_for(worker_id, partitions)
    ring = [(start + i) % partitions for i in range(partitions)]
    skipped = set(skip)
    return list(dict.fromkeys(p for p in [*hinted, *ring] if p not in skipped and 0 <= p < partitions))
