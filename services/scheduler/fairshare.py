"""Fair share across partitions: every partition's usage per tenant, and every tenant's plan, in every
scheduler instance.

A partition's owner sees only its own jobs, so DRF over its own leases is fair inside one partition and
nowhere else (a tenant whose jobs hash to partition 0 competes there only with the jobs that hash there too).
Here the usage of all partitions is shared the way `workerleases.py` shares worker leases:

- `TenantLedger` (one per owned partition, in `PartitionState`): GPU-seconds of the partition's ended
  leases per tenant, decayed (`render_ms` of the job states, i.e. from the events, so a new owner rebuilds
  it from the table), and the leases held now. Its reports are `events.TenantUsageReport`s.
- Each owner publishes its reports to the compacted `<prefix>.tenant-usage` (key `tenant/partition`) when
  they change (a lease granted or ended; at the end of the batch), and all of them after taking a partition.
- `FairShareView` reads that topic and the compacted `<prefix>.tenants` (`events.TenantSettings`, written
  by `spotreel tenant create|set`) into memory (a consumer thread).
- `GlobalUsage` is what dispatch passes to `DispatchIndex.choose`: a tenant's usage summed over the live
  ledgers of the partitions this instance owns and the latest reports of the others
  (`fairness.combined_usage`). `FairShareView.policies()` gives each tenant's weight and in-flight ceiling.
The view of other partitions is as old as their last report (a Kafka round trip after the batch that changed
it), so the in-flight ceiling can be overshot by grants made on two partitions within that time. Requesters
find the partition of the most under-served tenant through `PoolStats.min_share` (poolstats.py,
dispatch/order.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Callable

from spotreel.adapters.compacted import CompactedReader
from spotreel.codec import Codec
from spotreel.domain import events as ev
from spotreel.domain.fairness import DecayingTotal, TenantPolicy, TenantUsage, combined_usage, credit
from spotreel.domain.plans import policy
from spotreel.domain.state import JobState, Status
from spotreel.platform.topics import tenant_usage_topic, tenants_topic
from spotreel.config.settings import Settings

log = logging.getLogger("spotreel.scheduler.fairshare")

# What a held lease is charged until its pool's mean run time has been measured on the partition.
DEFAULT_EST_MS = 60_000.0


def usage_key(tenant: str, partition: int) -> bytes:
    return f"{tenant}/{partition}".encode()


def half_life_ms(settings: Settings) -> int | None:
    return settings.fair_share_half_life_s * 1000 if settings.fair_share_half_life_s > 0 else None


class TenantLedger:
    """One partition's GPU-seconds per tenant; fed every job state change by `PartitionState.observe`.

    A held lease counts as an estimate of a whole run (its pool's mean run time on this partition when it was
    granted, `est_ms`) until it ends, then as the GPU-seconds it used: a tenant that was just granted slots
    is ahead at once (fairness.py), and the sums stay O(1) per change."""

    def __init__(self, half_life_ms: int | None = 3_600_000,
                 est_ms: Callable[[str], float] = lambda pool: DEFAULT_EST_MS) -> None:
        self.half_life_ms = half_life_ms
        self.est_ms = est_ms
        self.consumed: dict[str, DecayingTotal] = {}
        self.used_s: dict[str, float] = {}
        # GPU-seconds of ended leases lost after their newest checkpoint (JobState.wasted_ms), per tenant and
        # per (tenant, pool); no decay.
        self.wasted_s: dict[str, float] = {}
        self.wasted_by_pool: dict[tuple[str, str], float] = {}
        self.running: dict[str, tuple[str, int, float]] = {}  # job_id -> (tenant, granted_at_ms, est seconds)
        self.in_flight: dict[str, tuple[int, float]] = {}  # tenant -> (leases held, their estimates' sum)
        self.dirty: set[str] = set()  # tenants whose report changed since the last publication

    def _hold(self, tenant: str, sign: int, est_s: float) -> None:
        n, total = self.in_flight.get(tenant, (0, 0.0))
        n += sign
        # Float dust: with nothing held the sum is exactly zero.
        self.in_flight[tenant] = (n, max(0.0, total + sign * est_s) if n > 0 else 0.0)
        if n <= 0:
            del self.in_flight[tenant]
        self.dirty.add(tenant)

    def observe(self, before: JobState | None, after: JobState) -> None:
        tenant, job_id = after.tenant, after.job_id
        held = after.lease is not None and after.status in Status.HOLDING_LEASE
        current = self.running.get(job_id)
        granted = after.lease.granted_at_ms if held else None  # type: ignore[union-attr]
        if current is not None and (not held or current[1] != granted):
            del self.running[job_id]
            self._hold(current[0], -1, current[2])
            current = None
        if held and current is None:
            est_s = max(0, self.est_ms(after.pool)) / 1000.0
            self.running[job_id] = (tenant, granted, est_s)  # type: ignore[assignment]
            self._hold(tenant, +1, est_s)
        # A lease's GPU-seconds join render_ms when it ends (evolve._lease_over); before=None is a rebuild,
        # which counts the job's whole history. A manual requeue resets render_ms: that drop is not usage.
        used_ms = after.render_ms - (before.render_ms if before is not None else 0)
        if used_ms > 0:
            amount = used_ms / 1000.0
            self.consumed[tenant] = credit(self.consumed.get(tenant, DecayingTotal()), amount, after.updated_at_ms,
                                           self.half_life_ms)
            self.used_s[tenant] = self.used_s.get(tenant, 0.0) + amount
            self.dirty.add(tenant)
        wasted_ms = after.wasted_ms - (before.wasted_ms if before is not None else 0)
        if wasted_ms > 0:
            self.wasted_s[tenant] = self.wasted_s.get(tenant, 0.0) + wasted_ms / 1000.0
            key = (tenant, after.pool)
            self.wasted_by_pool[key] = self.wasted_by_pool.get(key, 0.0) + wasted_ms / 1000.0
            self.dirty.add(tenant)

    def tenants(self) -> set[str]:
        return set(self.consumed) | set(self.in_flight)

    def report(self, tenant: str, partition: int, now_ms: int) -> ev.TenantUsageReport:
        total = self.consumed.get(tenant, DecayingTotal()).at(now_ms, self.half_life_ms)
        n, charge = self.in_flight.get(tenant, (0, 0.0))
        return ev.TenantUsageReport(tenant, partition, now_ms, total.value, n, charge, self.used_s.get(tenant, 0.0),
                                    self.wasted_s.get(tenant, 0.0))

    def take_reports(self, partition: int, now_ms: int) -> list[ev.TenantUsageReport]:
        """Reports of the tenants whose usage changed since the last call; clears the changes."""
        tenants, self.dirty = self.dirty, set()
        return [self.report(t, partition, now_ms) for t in sorted(tenants)]


class FairShareView:
    """The latest usage report of every (tenant, partition) and every tenant's settings, from the two
    compacted topics (one consumer thread); `caught_up` once what the topics held at start was read."""

    def __init__(self, settings: Settings, codec: Codec | None = None) -> None:
        self.settings = settings
        self.codec = codec or Codec.default()
        self.topics = (tenant_usage_topic(settings), tenants_topic(settings))
        self._lock = threading.Lock()
        self._usage: dict[str, dict[int, ev.TenantUsageReport]] = {}
        self._settings: dict[str, ev.TenantSettings] = {}
        self._policies: dict[str, TenantPolicy] = {}  # replaced, never mutated: read without the lock
        self._reader = CompactedReader(settings, "fair-share", self.topics, self.apply, codec=self.codec,
                                       fetch_wait_ms=50)
        self.caught_up = self._reader.caught_up

    # -- what the scheduler asks -------------------------------------------------------------------------

    def policies(self) -> Mapping[str, TenantPolicy]:
        return self._policies

    def tenant_settings(self, tenant: str) -> ev.TenantSettings | None:
        with self._lock:
            return self._settings.get(tenant)

    def reports(self, tenant: str) -> dict[int, ev.TenantUsageReport]:
        with self._lock:
            return dict(self._usage.get(tenant, {}))

    def tenants(self) -> set[str]:
        with self._lock:
            return set(self._usage)

    def apply(self, record: Any) -> None:
        """Also called for the owner's own reports as it produces them."""
        with self._lock:
            if isinstance(record, ev.TenantUsageReport):
                current = self._usage.setdefault(record.tenant, {}).get(record.partition)
                if current is None or current.at_ms <= record.at_ms:
                    self._usage[record.tenant][record.partition] = record
            elif isinstance(record, ev.TenantSettings):
                current = self._settings.get(record.tenant)
                if current is not None and current.at_ms > record.at_ms:
                    return
                try:
                    pol = policy(record.weight, record.max_in_flight)
                except ValueError:
                    log.warning("tenant %s: unusable settings %s; keeping the previous ones", record.tenant, record)
                    return
                self._settings[record.tenant] = record
                self._policies = {**self._policies, record.tenant: pol}

    # -- the consumer thread (adapters/compacted.py) ------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether `start` was called (its reader thread exists); the scheduler starts it once."""
        return self._reader.started

    def start(self) -> None:
        self._reader.start()

    def close(self) -> None:
        self._reader.close()


class GlobalUsage(Mapping[str, TenantUsage]):
    """Each tenant's usage over all partitions, computed when dispatch asks for it (and kept for this one
    decision): the live reports of the partitions in `local` (partition -> a function giving the tenant's
    report now), the view's latest reports of every other partition."""

    def __init__(self, view: FairShareView, local: Mapping[int, Callable[[str], ev.TenantUsageReport]],
                 now_ms: int, half_life_ms: int | None) -> None:
        self.view = view
        self.local = local
        self.now_ms = now_ms
        self.half_life_ms = half_life_ms
        self._memo: dict[str, TenantUsage] = {}

    def __getitem__(self, tenant: str) -> TenantUsage:
        got = self._memo.get(tenant)
        if got is None:
            reports = {p: r for p, r in self.view.reports(tenant).items() if p not in self.local}
            reports.update({p: report(tenant) for p, report in self.local.items()})
            got = self._memo[tenant] = combined_usage(tenant, reports.values(), self.now_ms, self.half_life_ms)
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(self.view.tenants())

    def __len__(self) -> int:
        return len(self.view.tenants())


class UsageOfAll:
    """`usage(part, now)`: each tenant's usage over all partitions (`GlobalUsage`), the owned partitions'
    (`parts`) live from their ledgers, the others from the view's latest reports. `part` is the partition
    asking (dispatch) or None (preemption); the answer is the same for every partition."""

    def __init__(self, view: FairShareView, parts: Mapping[int, Any], half_life_ms: int | None) -> None:
        self.view = view
        self.parts = parts
        self.half_life_ms = half_life_ms

    def __call__(self, part: Any, now: int) -> GlobalUsage:
        local = {p: (lambda t, ps=ps, p=p: ps.ledger.report(t, p, now)) for p, ps in self.parts.items()}
        return GlobalUsage(self.view, local, now, self.half_life_ms)
