"""Admission control: say no early and honestly (429/503 with Retry-After) rather than queue forever.

- Plan: a priority above the highest one the tenant's plan allows is refused with 403 (domain/plans.py),
  on submission and on PATCH. The tenant row (plan, rate, ceilings) is re-read with its API key's cache
  entry, so `spotreel tenant set` takes effect here within the key cache's lifetime.
- Rate: the domain's integer token bucket per tenant, kept in this process. With several gateway
  replicas each one enforces the tenant's rate on its own share of the traffic; a shared limiter
  (Redis, or a Kafka-side quota) is the step beyond that.
- In flight: the tenant's unfinished jobs (read model, cached for a second or two) against
  `max_in_flight × in_flight_queue_factor`; dispatch itself enforces `max_in_flight` on running work.
- ETA: the domain's fluid estimate (queue position, active workers, mean generation time) from the
  scheduler's pool-stats records (poolview.py), a model switch (`model_switch_seconds`) added for a job
  only idle workers with another model loaded can take; above `max_eta_seconds` → 503. Null, with the reason, when
  the pool has no statistics, no measured generation time or no worker yet. The queue position is the
  job's place in dispatch's order (tier, then the tenants' shares, then age: queueplace.py), the same for
  the 202 and for a queued job's `pending_reason`; records without the per-tier-and-tenant counts (an
  older scheduler) give every queued job of the pool as ahead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from spotreel.domain import eta, plans, quotas
from spotreel.api.config import GatewayConfig
from spotreel.services.gateway.public import queueplace
from spotreel.services.gateway.deps import PoolLoad, ReadStore, Tenant
from spotreel.api.errors import ApiError

# The refusals the checks count (spotreel_gateway_admission_rejections_total{reason}), by their error code.
REASONS = frozenset({"priority_not_allowed", "rate_limited", "in_flight_quota", "pool_saturated"})
# Pool-stats records older than this are not counted in a queue position (their scheduler stopped).
STALE_MS = 30_000


@dataclass(frozen=True)
class Estimate:
    queue_position: int | None
    wait_seconds: int | None
    reason: str | None  # why wait_seconds is None


class Admission:
    def __init__(self, cfg: GatewayConfig, reads: ReadStore, on_reject=lambda reason: None, pools=None,
                 usage=None, clock_ms=None) -> None:
        self.cfg = cfg
        self.reads = reads
        self.pools = pools
        self.usage = usage  # usage.KafkaTenantUsage or None: a tenant's GPU-seconds for its queue position
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.on_reject = on_reject
        self._buckets: dict[str, quotas.TokenBucket] = {}
        self._in_flight: dict[str, tuple[float, int]] = {}
        self._pools: dict[str, tuple[float, PoolLoad | None]] = {}

    def _limit(self, tenant: Tenant) -> quotas.RateLimit:
        per_minute = tenant.rate_per_minute or self.cfg.default_rate_per_minute
        return quotas.RateLimit(burst=max(1, self.cfg.default_burst), per_token_ms=max(1, 60_000 // per_minute))

    def report(self, exc: ApiError) -> None:
        """Count a refusal raised by a check called with `report=False`, once the caller knows it stands."""
        if exc.code in REASONS:
            self.on_reject(exc.code)

    def check_priority(self, tenant: Tenant, priority: int, *, report: bool = True) -> None:
        if not plans.priority_allowed(priority, tenant.max_priority):
            if report:
                self.on_reject("priority_not_allowed")
            raise ApiError(403, "priority_not_allowed",
                           f"priority {priority} is above {tenant.max_priority}, the highest the tenant's plan "
                           f"({tenant.plan or plans.CUSTOM.name}) allows", field="priority",
                           max_priority=tenant.max_priority)

    def check_rate(self, tenant: Tenant, now_ms: int, *, report: bool = True) -> None:
        result = quotas.admit(self._buckets.get(tenant.tenant_id), self._limit(tenant), now_ms)
        self._buckets[tenant.tenant_id] = result.bucket
        if not result.admitted:
            if report:
                self.on_reject("rate_limited")
            raise ApiError(429, "rate_limited", "too many submissions for this tenant; slow down",
                           retry_after=-(-result.retry_after_ms // 1000), retry_after_ms=result.retry_after_ms)

    def refund_rate(self, tenant: Tenant, now_ms: int) -> None:
        """The submission `check_rate` admitted at `now_ms` was a replay after all: its token goes back."""
        self._buckets[tenant.tenant_id] = quotas.refund(self._buckets.get(tenant.tenant_id), self._limit(tenant),
                                                        now_ms)

    async def check_in_flight(self, tenant: Tenant, *, report: bool = True) -> None:
        cap = (tenant.max_in_flight or self.cfg.default_max_in_flight) * self.cfg.in_flight_queue_factor
        now = time.monotonic()
        cached = self._in_flight.get(tenant.tenant_id)
        if cached is None or now - cached[0] > self.cfg.in_flight_cache_seconds:
            cached = (now, await self.reads.unfinished_jobs(tenant.tenant_id))
            self._in_flight[tenant.tenant_id] = cached
        if cached[1] >= cap:
            if report:
                self.on_reject("in_flight_quota")
            raise ApiError(429, "in_flight_quota", f"the tenant has {cached[1]} unfinished videos; the limit is {cap}",
                           retry_after=30, unfinished=cached[1], limit=cap)

    def counted(self, tenant_id: str) -> None:
        """A job was just accepted: count it before the read model does, so a burst cannot overshoot."""
        at, n = self._in_flight.get(tenant_id, (time.monotonic(), 0))
        self._in_flight[tenant_id] = (at, n + 1)

    async def _load(self, pool: str) -> PoolLoad | None:
        now = time.monotonic()
        cached = self._pools.get(pool)
        if cached is None or now - cached[0] > self.cfg.pool_stats_cache_seconds:
            source = self.pools.load if self.pools is not None else self.reads.pool_load
            cached = (now, await source(pool))
            self._pools[pool] = cached
        return cached[1]

    async def _ahead(self, pool: str, tenant: Tenant, priority: int, own_ahead: int | None) -> tuple[bool, int | None]:
        """(known, jobs ahead in dispatch's order); known False: the records carry no per-tenant counts.
        `own_ahead` None: a new job, behind all of its tenant's queued jobs of its tier."""
        records = getattr(self.pools, "records", None)
        if records is None:
            return False, None
        queue = queueplace.groups(records(pool), self.clock_ms(), STALE_MS)
        if queue is None:
            return False, None
        if own_ahead is None:
            own_ahead = queueplace.own_count(queue, tenant.tenant_id, priority)
        used = None
        if self.usage is not None and not any(g.tenant == tenant.tenant_id for g in queue):
            try:
                used = (await self.usage.usage(tenant.tenant_id)).get("fair_share_gpu_seconds")
            except Exception:  # noqa: BLE001 - advice only: a tenant with no known usage counts as none
                used = None
        load = await self._load(pool)
        cost = load.mean_generation_seconds if load is not None else None
        place = queueplace.position(queue, priority, tenant.tenant_id, own_ahead, cost, used, tenant.plan)
        return True, None if place is None else place - 1

    async def estimate(self, pool: str, tenant: Tenant | None = None, priority: int | None = None,
                       own_ahead: int | None = None) -> Estimate:
        """Queue position and wait for a job of `tenant` and `priority` in `pool` (a new one unless
        `own_ahead`, its tenant's older jobs of its tier, is given); without a tenant, behind every queued job."""
        try:
            load = await self._load(pool)
            known, ahead = (False, None) if tenant is None or priority is None else \
                await self._ahead(pool, tenant, priority, own_ahead)
        except Exception:  # noqa: BLE001 - an ETA is advice; a read failure must not refuse the job
            return Estimate(None, None, "pool statistics unavailable")
        if known and ahead is None:
            return Estimate(None, None, "the tenant is at its in-flight ceiling: the job waits for its leases to end")
        if load is None:
            return Estimate(ahead + 1 if known else 1, None, "no statistics for this pool yet")
        jobs_ahead = ahead if known else load.queued
        workers = load.workers_active or 0
        gen = load.mean_generation_seconds
        if gen is None:
            return Estimate(jobs_ahead + 1, None, "no measured generation time for this pool yet")
        idle = min(workers, load.workers_idle or 0)
        # Idle workers with another model loaded switch (unload, load) before they take a job here.
        warm = idle if load.workers_idle_warm is None else min(idle, load.workers_idle_warm)
        e = eta.estimate(jobs_ahead, workers, int(gen * 1000), idle_workers=idle, cold_idle_workers=idle - warm,
                         switch_ms=int(self.cfg.model_switch_seconds * 1000))
        if e.wait_ms is None:
            return Estimate(e.queue_position, None, "no active worker in this pool")
        return Estimate(e.queue_position, e.wait_seconds, None)

    def check_eta(self, est: Estimate, *, report: bool = True) -> None:
        if est.wait_seconds is not None and est.wait_seconds > self.cfg.max_eta_seconds:
            if report:
                self.on_reject("pool_saturated")
            retry = min(600, max(30, est.wait_seconds - self.cfg.max_eta_seconds))
            raise ApiError(503, "pool_saturated",
                           f"estimated wait {est.wait_seconds}s exceeds {self.cfg.max_eta_seconds}s",
                           retry_after=retry, estimated_wait_seconds=est.wait_seconds)
