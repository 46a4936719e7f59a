"""What the scheduler publishes besides events, after a batch, a rebuild or a stats tick: worker leases
(`<prefix>.worker-leases`, workerleases.py), tenant usage (`<prefix>.tenant-usage`, fairshare.py) and pool
stats (`<prefix>.pool-stats`, poolstats.py), and the plain "send these records, await their acks"."""

from __future__ import annotations

from dataclasses import dataclass

from typing import Any

from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.platform.topics import pool_stats_topic, tenant_usage_topic, worker_leases_topic
from spotreel.config.settings import Settings

from spotreel.services.scheduler import clock
from spotreel.services.scheduler.fairshare import FairShareView, UsageOfAll, usage_key
from spotreel.services.scheduler.partition import PartitionState
from spotreel.services.scheduler.poolstats import pool_stats, share_if_room, standing
from spotreel.services.scheduler.preempting import preemptible_by_tier
from spotreel.services.scheduler.workerleases import WorkerLeaseIndex, record_key


@dataclass(eq=False, repr=False)
class Publisher:
    """Sends through the Faust app's producer; applies what it publishes to the local views (the worker-lease
    index, the fair-share view) at once, so the next decision of this process sees it without reading it
    back; pool stats are judged with `usage` and the preemption `budget`."""

    app: Any  # its producer is built when the app starts: looked up on use
    settings: Settings
    codec: Codec
    metrics: Any
    fair: FairShareView
    worker_leases: WorkerLeaseIndex
    usage: UsageOfAll
    budget: Any

    async def send_all(self, records: list[tuple]) -> None:
        """Send (topic, key, value, partition[, headers]) records, then await every ack."""
        futures = [await self.app.producer.send(r[0], r[1], r[2], r[3], None, r[4] if len(r) > 4 else None)
                   for r in records]
        for fut in futures:
            await fut

    async def publish_leases(self, part: PartitionState) -> None:
        """Grants and ends of leases to `<prefix>.worker-leases` (workerleases.py), into the local index at
        once: the next RequestWork of that worker is judged by it without waiting to read it back."""
        news, part.lease_news = part.lease_news, []
        if not news:
            return
        topic = worker_leases_topic(self.settings)
        for rec in news:
            self.worker_leases.apply(rec)
        await self.send_all([(topic, record_key(r.worker_id, r.job_id), self.codec.encode_message(r),
                              partition_for(r.worker_id, self.settings.partitions)) for r in news])

    async def publish_usage(self, part: PartitionState) -> None:
        """The partition's changed tenant usage to `<prefix>.tenant-usage` (fairshare.py), into the local view
        at once. Not awaited: a lost report is replaced by the next one, or by a new owner's after a crash."""
        reports = part.ledger.take_reports(part.partition, clock.now_ms())
        if not reports:
            return
        topic = tenant_usage_topic(self.settings)
        for r in reports:
            self.fair.apply(r)
            # The send is queued here; its ack is not waited for.
            await self.app.producer.send(topic, usage_key(r.tenant, r.partition), self.codec.encode_message(r),
                                         partition_for(r.tenant, self.settings.partitions), None, None)

    async def publish_pools(self, p: int, part: PartitionState, now: int) -> None:
        """The partition's pool stats, one record per pool."""
        part.freshly_queued.clear()
        part.forget_workers(now)
        usage, policies = self.usage(part, now), self.fair.policies()
        for stats in pool_stats(part, now, lambda t: share_if_room(usage.get(t), policies.get(t)),
                                lambda t: standing(usage.get(t), policies.get(t)),
                                lambda pool: preemptible_by_tier(part, pool, now, self.budget)):
            self.metrics.queue_depth.labels(stats.pool, str(p)).set(stats.queued)
            part.published_queued[stats.pool] = stats.queued
            await self.app.producer.send(pool_stats_topic(self.settings), f"{stats.pool}/{p}".encode(),
                                         self.codec.encode_message(stats), p, None, None)

    async def publish_fresh_work(self, parts: dict[int, PartitionState]) -> None:
        """After a batch: a partition where a job was queued in a pool whose last stats showed none queued,
        or that has idle workers (its roll: they asked, or a gateway's pulse vouched for them), publishes its
        stats now, so idle workers (who ask where the stats show work, dispatch/asking.py) hear of it within
        a batch instead of up to a tick later. With a backlog and no idle worker nothing is published here.
        A gateway's idle workers do not ask their own partition just to be counted (its pulse vouches for
        them), so no such ask takes a freshly queued job within moments: this record is how they hear of it."""
        now = clock.now_ms()
        for p, part in list(parts.items()):
            if part.freshly_queued and any(not part.published_queued.get(pool) or part.workers.idle_count(pool)
                                           for pool in part.freshly_queued):
                await self.publish_pools(p, part, now)
            else:
                part.freshly_queued.clear()
