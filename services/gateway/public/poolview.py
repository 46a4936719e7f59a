"""Pool load for the ETA, from the scheduler's compacted pool-stats topic (one record per pool and
partition, key "<pool>/<partition>").

Each scheduler partition reports what it sees of a pool: its queued jobs, its leases (busy workers), the
idle and draining workers that asked it for work lately, and its measured mean generation time. Summed
up for the gateway:
- queued and busy workers are additive (a job and its lease live in exactly one partition);
- idle workers are NOT: an idle worker asks every partition in turn, so each partition counts it. The
  largest count is taken (a lower bound, exact when every idle worker visited every partition lately);
- warm idle workers (those with the pool's model loaded; the others switch models first) likewise: the
  largest count, unknown when no record carries it;
- mean generation time: the partitions' means, weighted by their busy workers (at least 1 each), over the
  partitions that have a measurement. A field the scheduler reports directly (`workers_active`,
  `mean_generation_ms`) is preferred when the record carries it.
Records older than `stale_ms` are ignored (a partition whose scheduler stopped reporting). No record, or
no measured generation time yet, gives None parts: the 202 then says `estimated_wait_seconds: null` with
the reason.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Iterable

from spotreel.adapters.compacted import CompactedReader
from spotreel.platform.consumers import private_group
from spotreel.services.gateway.deps import PoolLoad

log = logging.getLogger("spotreel.gateway.pools")


def _num(record: Any, name: str, default: float = 0) -> float:
    value = getattr(record, name, None)
    return default if value is None else value


def aggregate(records: Iterable[Any], now_ms: int, stale_ms: int) -> PoolLoad | None:
    fresh = [r for r in records if now_ms - r.at_ms <= stale_ms]
    if not fresh:
        return None
    queued = int(sum(r.queued for r in fresh))
    busy = int(sum(r.leased for r in fresh))
    idle = int(max(_num(r, "idle_workers") for r in fresh))
    reported = [r.workers_active for r in fresh if getattr(r, "workers_active", None) is not None]
    active = int(max(reported)) if reported else busy + idle
    weighted = total = 0.0
    for r in fresh:
        gen_ms = _num(r, "mean_generation_ms") or _num(r, "mean_run_ms")
        if gen_ms > 0:
            w = max(1, r.leased)
            weighted += gen_ms * w
            total += w
    mean_s = weighted / total / 1000 if total else None
    # Like idle workers, a warm idle worker asks every partition: the largest count, None if none reports it.
    warm = [r.warm_idle_workers for r in fresh if getattr(r, "warm_idle_workers", None) is not None]
    idle = min(idle, active)
    return PoolLoad(queued, active, idle, mean_s, min(max(warm), idle) if warm else None)


class KafkaPoolStats:
    """Follows the pool-stats topic from its start in one daemon thread; `load(pool)` is a dict read."""

    def __init__(self, settings, codec=None, stale_ms: int = 120_000, clock_ms=None) -> None:
        import time

        from spotreel.codec import Codec
        from spotreel.platform.topics import pool_stats_topic

        self.settings = settings
        self.topic = pool_stats_topic(settings)
        self.codec = codec or Codec.default()
        self.stale_ms = stale_ms
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._latest: dict[str, dict[int, Any]] = {}
        self._lock = threading.Lock()
        # Started at once, connecting on its thread: estimates stay null until the broker answers.
        self._reader = CompactedReader(settings, "gateway-pool-stats", [self.topic], self.apply, codec=self.codec,
                                       group_id=private_group(settings, "gateway-pools"), fetch_wait_ms=500,
                                       poll_s=0.5, quiet=True, retry_s=5.0, track_end=False)
        self._reader.start()

    def apply(self, rec: Any) -> None:
        with self._lock:
            self._latest.setdefault(rec.pool, {})[rec.partition] = rec

    def records(self, pool: str) -> list[Any]:
        """The latest record of each partition for `pool` (stale ones included: the reader judges them)."""
        with self._lock:
            return list(self._latest.get(pool, {}).values())

    async def load(self, pool: str) -> PoolLoad | None:
        with self._lock:
            records = list(self._latest.get(pool, {}).values())
        return aggregate(records, self.clock_ms(), self.stale_ms)

    def close(self) -> None:
        self._reader.close()
