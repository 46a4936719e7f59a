"""The stats tick and the eviction tick (every `stats_interval`, 1 s by default).

Stats: each owned partition's pool stats to the compacted `<prefix>.pool-stats` (poolstats.py), per-tenant
GPU seconds and queue depth and lag to Prometheus, the double-grant check (one worker granted by two
partitions in one moment: the later grant is handed back), then priority preemption (preempting.py).
What they publish goes through publishing.py.
Eviction: terminal jobs and summaries past their retention leave the table (domain/retention.py,
eviction.py), between batches and never during a rebuild."""

from __future__ import annotations

from dataclasses import dataclass

import asyncio
import logging
from typing import Any, Callable

from spotreel.codec import Codec
from spotreel.domain.commands import PreemptLease, ReleaseLease
from spotreel.domain.events import WorkerLeaseHeld
from spotreel.domain.fairness import TenantPolicy, share
from spotreel.domain.leases import UNCLAIMED
from spotreel.config.settings import Settings

from spotreel.services.scheduler import clock, statecodec
from spotreel.services.scheduler.fairshare import FairShareView, UsageOfAll
from spotreel.services.scheduler.partition import PartitionState
from spotreel.services.scheduler.poolstats import share_if_room
from spotreel.services.scheduler.preempting import PoolStatsView, decide_pool, note_asked
from spotreel.services.scheduler.publishing import Publisher
from spotreel.services.scheduler.table import Store
from spotreel.services.scheduler.workerleases import WorkerLeaseIndex, later_grant

log = logging.getLogger("spotreel.scheduler")
# Jobs (and summaries) evicted per partition per stats tick at most (domain/retention.py): a backlog of due
# evictions (a restart after a long stop) is spread over ticks instead of blocking the loop.
EVICT_PER_TICK = 5000


@dataclass(eq=False, repr=False)
class Stats:
    """The stats tick over the owned partitions (`parts`): metrics, pool stats (through `publisher`), the
    double-grant check against the worker-lease index, and preemption judged with `usage`, the fair-share
    view's policies and the other instances' pool stats (`pool_view`), within `budget`."""

    app: Any  # its producer and consumer are built when the app starts: looked up on use
    settings: Settings
    codec: Codec
    commands: str
    parts: dict[int, PartitionState]
    metrics: Any
    publisher: Publisher
    usage: UsageOfAll
    fair: FairShareView
    pool_view: PoolStatsView
    worker_leases: WorkerLeaseIndex
    budget: Any

    async def publish_stats(self) -> None:
        now = clock.now_ms()
        for p, part in list(self.parts.items()):
            await self._release_double_grants(p, part)
            for tenant, used in part.ledger.used_s.items():
                self.metrics.tenant_gpu_seconds.labels(tenant, str(p)).set(used)
            for (tenant, pool), wasted in part.ledger.wasted_by_pool.items():
                self.metrics.tenant_wasted_gpu_seconds.labels(tenant, pool, str(p)).set(wasted)
            await self.publisher.publish_pools(p, part, now)
            for tp in self.app.consumer.assignment():
                if tp.topic == self.commands and tp.partition == p:
                    high = self.app.consumer.highwater(tp)
                    if high is not None:
                        self.metrics.lag.labels(str(p)).set(max(0, high - part.applied_upto - 1))
        await self._preempt(now)

    async def _preempt(self, now: int) -> None:
        """Ask lower-tier leases of the owned partitions back for higher-tier work waiting in a full pool
        (preempting.py, domain/preemption.py). The PreemptLease goes through the commands topic like a timer's
        command: `decide` judges it against the job's state when it is read."""
        if self.budget.per_minute <= 0 or not self.parts:
            return
        parts = dict(self.parts)
        pools = {pool for part in parts.values() for pool in part.holders.values()}
        others = self.pool_view.records()
        usage, policies = self.usage(None, now), self.fair.policies()
        for pool in sorted(pools):
            if self.pool_view.settling(pool, parts):
                continue  # another instance's requests are arriving (preempting.py, SETTLE_S)
            chosen = decide_pool(pool, parts, others, now, self.budget, self.worker_leases.holds,
                                 self.settings.preempt_fair_share_ratio,
                                 lambda t: share_if_room(usage.get(t), policies.get(t)),
                                 lambda t: share(usage.get(t), policies.get(t) or TenantPolicy()))
            for p, c in chosen:
                note_asked(parts[p], pool, now)
                command = PreemptLease(f"preempt:{c.job_id}:e{c.epoch}", c.job_id, c.epoch, c.for_priority, c.reason)
                log.info("pool %s: asking %s (epoch %d) to checkpoint and release (%s) for waiting priority %d%s",
                         pool, c.job_id, c.epoch, c.reason, c.for_priority,
                         f", tenant {c.for_tenant}" if c.for_tenant else "")
                self.metrics.preempt_requests.labels(pool, command.reason).inc()
                await self.app.producer.send(self.commands, c.job_id.encode(), self.codec.encode_message(command),
                                             p, None, None)

    async def _release_double_grants(self, p: int, part: PartitionState) -> None:
        """Two partitions granted one worker in the same moment: the later grant's owner hands its lease back
        (unclaimed; refused by the domain if the worker already acted on it). Only the workers the index shows
        holding two or more are looked at (it keeps them as it reads), not every lease of the partition."""
        for worker in self.worker_leases.doubly_held():
            held = self.worker_leases.held_by(worker)
            for mine in held:
                if mine.partition == p and part.workers_of.get(mine.job_id) == worker and \
                        any(later_grant(mine, o) for o in held if o.job_id != mine.job_id):
                    await self._hand_back(p, part, worker, mine)

    async def _hand_back(self, p: int, part: PartitionState, worker: str, mine: WorkerLeaseHeld) -> None:
        """Release `mine` (the later grant) as unclaimed, once per lease."""
        job_id = mine.job_id
        command_id = f"double-grant:{job_id}:e{mine.epoch}"
        if command_id in part.double_released:
            return
        part.double_released.add(command_id)
        log.warning("worker %s holds two leases; handing back %s epoch %d (the later grant)", worker, job_id,
                    mine.epoch)
        command = ReleaseLease(command_id, job_id, mine.epoch, worker, UNCLAIMED)
        await self.app.producer.send(self.commands, job_id.encode(), self.codec.encode_message(command), p,
                                     None, None)



@dataclass(eq=False, repr=False)
class Eviction:
    """The eviction tick over the owned partitions (`parts`), writing through the store, between batches
    (`batch_lock`) and never while `rebuilding()`."""

    app: Any  # its consumer is built when the app starts: looked up on use
    commands: str
    parts: dict[int, PartitionState]
    store: Store
    metrics: Any
    batch_lock: asyncio.Lock
    rebuilding: Callable[[], bool]

    async def evict(self) -> None:
        """Bounded state (domain/retention.py): terminal jobs past their retention leave the table (summary
        first, then the job's tombstone, in one changelog partition), summaries past theirs follow. Not an
        event: the table is derived, and catch-up treats a summary as the job's state, so it never folds an
        evicted job's JobSubmitted again. Runs between batches (the lock), never during a rebuild, and only on
        partitions this process owns now; at most `EVICT_PER_TICK` of each per tick."""
        if self.rebuilding() or self.batch_lock.locked() or not self.parts:
            return
        async with self.batch_lock:
            owned = self.owned()
            for p, part in list(self.parts.items()):
                if p in owned:
                    self._evict_partition(p, part, clock.now_ms())

    def owned(self) -> set[int]:
        return {tp.partition for tp in self.app.consumer.assignment() if tp.topic == self.commands}

    def _evict_partition(self, p: int, part: PartitionState, now: int) -> None:
        store = self.store
        stubs, forgotten = part.evictions.sweep(store.get, now, EVICT_PER_TICK)
        for stub in stubs:
            store.put(p, statecodec.summary_key(stub.job_id), statecodec.dumps_summary(stub))
            store.delete(p, stub.job_id.encode())
            store.cache.pop(stub.job_id, None)
            part.fired.pop(stub.job_id, None)
        for job_id in forgotten:
            store.delete(p, statecodec.summary_key(job_id))
            store.cache.pop(job_id, None)
        self.metrics.evicted.labels("job").inc(len(stubs))
        self.metrics.evicted.labels("summary").inc(len(forgotten))
