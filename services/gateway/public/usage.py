"""GET /v1/usage: the calling tenant's own GPU-seconds, from the scheduler's compacted `<prefix>.tenant-usage`
(one `TenantUsageReport` per tenant and partition, published by the partition's owner whenever the tenant's
usage there changes; services/scheduler/fairshare.py).

Answered from memory: `KafkaTenantUsage` follows the topic from its start in one daemon thread. The figures:
- `used_gpu_seconds`: GPU-seconds of the tenant's ended leases (success, failure and preemption alike: the
  GPU was busy), summed over partitions, without decay; a lease that was never picked up counts nothing;
- `fair_share_gpu_seconds`: what dispatch weighs the tenant by: the decayed total plus the estimate of the
  leases it holds (domain `fairness.combined_usage`, the scheduler's half-life);
- `wasted_gpu_seconds`: of `used_gpu_seconds`, the time after a lease's newest checkpoint when it ended
  without success (lost, failed, released or cancelled: work a next lease redoes, or lost with the job);
- `leases_held`, and `as_of` (the newest report's time, epoch ms; null with no report yet).
Time a lease is held counts only once it ends.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Iterable

from aiohttp import web

from spotreel.adapters.compacted import CompactedReader
from spotreel.platform.consumers import private_group
from spotreel.domain.fairness import combined_usage
from spotreel.services.gateway.auth import TENANT
from spotreel.services.gateway.context import gateway
from spotreel.api.errors import ApiError

log = logging.getLogger("spotreel.gateway.usage")


def summarize(tenant: str, reports: Iterable[Any], now_ms: int, half_life_ms: int | None) -> dict[str, Any]:
    reports = list(reports)
    share = combined_usage(tenant, reports, now_ms, half_life_ms)
    return {"tenant": tenant, "used_gpu_seconds": round(sum(r.used_gpu_seconds for r in reports), 3),
            "wasted_gpu_seconds": round(sum(getattr(r, "wasted_gpu_seconds", 0.0) for r in reports), 3),
            "fair_share_gpu_seconds": round(share.gpu_seconds, 3), "leases_held": share.in_flight,
            "half_life_seconds": None if half_life_ms is None else half_life_ms // 1000,
            "as_of": max((r.at_ms for r in reports), default=None)}


class KafkaTenantUsage:
    """The latest report of every (tenant, partition); `usage(tenant)` is a dict read."""

    def __init__(self, settings, codec=None, clock_ms=None) -> None:
        from spotreel.codec import Codec
        from spotreel.platform.topics import tenant_usage_topic

        self.settings = settings
        self.topic = tenant_usage_topic(settings)
        self.codec = codec or Codec.default()
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        hl = settings.fair_share_half_life_s
        self.half_life_ms = hl * 1000 if hl > 0 else None
        self._latest: dict[str, dict[int, Any]] = {}
        self._lock = threading.Lock()
        self._reader = CompactedReader(settings, "gateway-tenant-usage", [self.topic], self.apply, codec=self.codec,
                                       group_id=private_group(settings, "gateway-usage"), fetch_wait_ms=500,
                                       poll_s=0.5, quiet=True, retry_s=5.0, track_end=False)
        self._reader.start()

    def apply(self, rec: Any) -> None:
        with self._lock:
            current = self._latest.setdefault(rec.tenant, {}).get(rec.partition)
            if current is None or current.at_ms <= rec.at_ms:
                self._latest[rec.tenant][rec.partition] = rec

    async def usage(self, tenant: str) -> dict[str, Any]:
        with self._lock:
            reports = list(self._latest.get(tenant, {}).values())
        return summarize(tenant, reports, self.clock_ms(), self.half_life_ms)

    def close(self) -> None:
        self._reader.close()


def read_reports(settings, codec=None, timeout: float = 30.0) -> list[Any]:
    """Everything the tenant-usage topic holds now, the latest report per (tenant, partition): for
    `spotreel usage`, which reads once and exits."""
    from spotreel.platform.topics import tenant_usage_topic

    latest: dict[tuple[str, int], Any] = {}

    def keep(rec: Any) -> None:
        held = latest.get((rec.tenant, rec.partition))
        if held is None or held.at_ms <= rec.at_ms:
            latest[(rec.tenant, rec.partition)] = rec

    reader = CompactedReader(settings, "usage-cli", [tenant_usage_topic(settings)], keep, codec=codec, poll_s=1.0,
                             quiet=True, end_timeout_s=timeout)
    try:
        reader.read_to_end(timeout)
    finally:
        reader.close()
    return list(latest.values())


def usage_table(reports: Iterable[Any], now_ms: int, half_life_ms: int | None) -> list[dict[str, Any]]:
    """One summary per tenant, the largest user first."""
    by_tenant: dict[str, list[Any]] = {}
    for r in reports:
        by_tenant.setdefault(r.tenant, []).append(r)
    rows = [summarize(t, rs, now_ms, half_life_ms) for t, rs in by_tenant.items()]
    return sorted(rows, key=lambda row: (-row["used_gpu_seconds"], row["tenant"]))


async def get_usage(request: web.Request) -> web.Response:
    source = gateway(request).deps.usage
    if source is None:
        raise ApiError(503, "usage_unavailable", "this gateway does not follow the tenant usage topic",
                       retry_after=30)
    return web.json_response(await source.usage(request[TENANT].tenant_id))


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/v1/usage", get_usage)
