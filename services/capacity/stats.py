"""The pool's statistics as the scheduler publishes them: the latest record of every partition, summed."""

from __future__ import annotations

import logging
from typing import Any

from spotreel.adapters.compacted import CompactedReader
from spotreel.codec import Codec
from spotreel.domain import events as ev
from spotreel.platform.topics import pool_stats_topic
from spotreel.services.capacity.policy import PoolView
from spotreel.config.settings import Settings

log = logging.getLogger("spotreel.capacity")


def sum_pool(pool: str, records: list[ev.PoolStats]) -> PoolView:
    """Totals of one pool over partitions. The mean run time is weighted by each partition's leased count
    (a partition that ran nothing has no say); so is the lease-loss rate, over the partitions that hold
    leases or lost some (a partition idle now but with losses in its hour still counts once)."""
    mine = [r for r in records if r.pool == pool]
    return PoolView(pool=pool, queued=sum(r.queued for r in mine), leased=sum(r.leased for r in mine),
                    oldest_wait_ms=max((r.oldest_wait_ms for r in mine), default=0),
                    mean_run_ms=_weighted([(r.mean_run_ms, r.leased) for r in mine if r.mean_run_ms > 0]),
                    loss_rate_per_hour=_weighted([(r.lease_loss_rate_per_hour, r.leased) for r in mine
                                                  if r.lease_loss_rate_per_hour > 0 or r.leased > 0]))


def _weighted(values: list[tuple[float, int]]) -> float:
    weights = [(v, max(1, n)) for v, n in values]
    return sum(v * w for v, w in weights) / sum(w for _, w in weights) if weights else 0.0


class PoolStatsReader:
    """Tails the compacted pool-stats topic from the beginning, keeping the newest record per partition."""

    def __init__(self, settings: Settings, codec: Codec | None = None) -> None:
        self.codec = codec or Codec.default()
        self.latest: dict[tuple[str, int], ev.PoolStats] = {}
        self._reader = CompactedReader(settings, "capacity", [pool_stats_topic(settings)], self.apply,
                                       codec=self.codec, batch=1000, group_id=f"{settings.topic_prefix}.capacity",
                                       track_end=False)

    def apply(self, rec: Any) -> None:
        if isinstance(rec, ev.PoolStats):
            self.latest[(rec.pool, rec.partition)] = rec

    def poll(self, timeout: float = 0.5) -> int:
        """Take in what has arrived; the number of records read."""
        return self._reader.poll(timeout)

    def view(self, pool: str) -> PoolView:
        return sum_pool(pool, list(self.latest.values()))

    def close(self) -> None:
        self._reader.close()
