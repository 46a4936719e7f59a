"""On assignment: before the first command of a partition is applied, its derived state is rebuilt.

Faust restores the table's changelog and then calls `JobTable.on_recovery_completed`, which lands in
`Rebuild.restored`. For each newly owned partition the owner reads the events topic's tail from the table's
marker (catchup.py: the table catches up, `applied_upto` = the last event's `cmd-offset`), what the
redelivery window already produced (redelivery.py: grants, dead letters), re-sends follow-ups that may never
have been sent, rebuilds the PartitionState (dispatch index, timers, ledgers, evictions) from the table,
gives every held lease a full TTL from now, and republishes worker leases and tenant usage. README.md,
"Exactly-once without Kafka transactions", is the proof this order serves."""

from __future__ import annotations

from dataclasses import dataclass

import asyncio
import json
import logging
import time
from typing import Any

from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.domain import events as ev
from spotreel.domain.renewals import after_handover
from spotreel.domain.retention import Retention
from spotreel.platform.topics import commands_deadletter_topic, commands_topic, events_topic, scheduler_app_id
from spotreel.config.settings import Settings

from spotreel.services.scheduler import clock, followups, redelivery, statecodec
from spotreel.services.scheduler.catchup import catch_up
from spotreel.services.scheduler.fairshare import FairShareView
from spotreel.services.scheduler.partition import PartitionState
from spotreel.services.scheduler.preempting import PoolStatsView
from spotreel.services.scheduler.publishing import Publisher
from spotreel.services.scheduler.table import Store, meta_key
from spotreel.services.scheduler.workerleases import WorkerLeaseIndex

log = logging.getLogger("spotreel.scheduler")


@dataclass(eq=False, repr=False)
class Rebuild:
    """The assignment path: rebuilds the owned partitions' states (`parts`, shared with every part) from the
    store's table and the events topic, starting the worker-lease index, the fair-share view and the
    pool-stats view (if preemption is on) first; writes through the store and publishes through `publisher`.
    `rebuilding` is true while it runs (the eviction tick waits)."""

    app: Any  # its consumer is built when the app starts: looked up on use
    settings: Settings
    codec: Codec
    parts: dict[int, PartitionState]
    store: Store
    publisher: Publisher
    metrics: Any
    worker_leases: WorkerLeaseIndex
    fair: FairShareView
    pool_view: PoolStatsView
    budget: Any
    retention: Retention
    half_life_ms: int | None

    def __post_init__(self) -> None:
        self.commands = commands_topic(self.settings)
        self.events = events_topic(self.settings)
        self.rebuilding = False

    async def restored(self) -> None:
        self.rebuilding = True
        try:
            await self.on_assigned()
        finally:
            self.rebuilding = False

    async def on_assigned(self) -> None:
        if not self.worker_leases.started:  # started once, before the first rebuild
            await asyncio.to_thread(self.worker_leases.start)
        if not await asyncio.to_thread(self.worker_leases.caught_up.wait, 30.0):
            log.warning("worker-leases index not caught up after 30 s; going on with what it read")
        if not self.fair.started:  # started once, like the worker-leases index
            await asyncio.to_thread(self.fair.start)
        if not self.pool_view.started and self.budget.per_minute > 0:  # once
            await asyncio.to_thread(self.pool_view.start)
        if not await asyncio.to_thread(self.fair.caught_up.wait, 30.0):
            log.warning("tenant usage and settings not caught up after 30 s; going on with what was read")
        assigned = {tp.partition for tp in self.app.consumer.assignment() if tp.topic == self.commands}
        for p in list(self.parts):
            if p not in assigned:
                for tenant in self.parts[p].ledger.used_s:  # its new owner exports them now
                    self.metrics.tenant_gpu_seconds.remove(tenant, str(p))
                for tenant, pool in self.parts[p].ledger.wasted_by_pool:
                    self.metrics.tenant_wasted_gpu_seconds.remove(tenant, pool, str(p))
                del self.parts[p]
        self.store.forget_unowned(assigned)
        self.store.clear_caches()
        started = time.monotonic()
        for p in sorted(assigned - set(self.parts)):
            self.parts[p] = await self._rebuild(p)
        await self._seek_uncommitted(assigned)
        log.info("scheduler owns partitions %s (rebuilt in %.2fs)", sorted(assigned), time.monotonic() - started)

    async def _seek_uncommitted(self, assigned: set[int]) -> None:
        """Put every commands partition without a committed offset back to the start of its log.

        Faust pops records off the fetcher and throws them away when the flow stops or the generation
        changes mid-fetch (a rebalance), counting on its seek to the committed offset after recovery to
        read them again. That seek skips partitions whose committed offset is missing or 0
        (`if offset and offset > 0`), so there the dropped records were lost for good and the partition
        went silent: the kill -9 chaos test's stalls, when the first scheduler died before its first
        commit. From the log start nothing is lost; what was applied already is skipped by offset."""
        if not assigned:
            return
        starts = await asyncio.to_thread(redelivery.start_offsets, self.settings.kafka_bootstrap,
                                         scheduler_app_id(self.settings), self.commands, sorted(assigned))
        for tp in self.app.consumer.assignment():
            if tp.topic == self.commands and tp.partition in starts:
                committed, low = starts[tp.partition]
                if committed <= 0:
                    part = self.parts[tp.partition]
                    part.read_upto = max(part.read_upto, low - 1)  # a log start past 0 is no hole (ordering.py)
                    await self.app.consumer.seek(tp, low)
                    log.info("partition %d: no committed offset, reading from the log start %d", tp.partition, low)

    async def _rebuild(self, p: int) -> PartitionState:
        part = PartitionState(p)
        part.ledger.half_life_ms = self.half_life_ms
        part.intake.hold_ms = self.settings.scheduler_gateway_hold_s * 1000
        part.evictions.policy = self.retention
        raw_meta = self.store.table.data.get(meta_key(p))
        marker = json.loads(raw_meta)["events_offset"] if raw_meta else -1
        caught, part.deadlettered, committed = await asyncio.to_thread(self._read_back, p, marker)
        # Everything before the group's committed offset was read by an earlier owner: the log horizon of the
        # lease timers starts there, even when those commands produced no event (partition.py, `due`).
        part.read_upto = max(caught.applied_upto, committed - 1)
        part.grants = caught.grants
        # Follow-ups of the events past the marker may never have been sent: send them (again) first.
        await self.publisher.send_all([(self.commands, followups.key_of(c).encode(), self.codec.encode_message(c),
                               partition_for(followups.key_of(c), self.settings.partitions))
                              for c in caught.followups])
        for state in caught.states.values():
            self.store.put_state(p, state)
        for sched in caught.schedules.values():
            self.store.put_schedule(p, sched)
        part.applied_upto, part.applied_entry = caught.applied_upto, caught.applied_entry
        part.events_offset = caught.events_offset
        if caught.states or caught.schedules:
            self.store.put_marker(part)
        n = self.settings.partitions
        for key in list(self.store.table.data.keys()):
            if key.startswith(b"~s:"):
                schedule_id = key[3:].decode()
                if partition_for(schedule_id, n) == p:
                    part.observe_schedule(None, self.store.get_schedule(schedule_id))
                continue
            if key.startswith(statecodec.SUMMARY_PREFIX):
                job_id = key[len(statecodec.SUMMARY_PREFIX):].decode()
                if partition_for(job_id, n) == p:
                    part.evictions.observe(self.store.get(job_id))
                continue
            if key.startswith(b"~") or partition_for(key, n) != p:
                continue
            part.observe(None, self.store.get(key.decode()))
        # The renewals the previous owner answered without persisting them are not in the table: every held
        # lease gets a full TTL from now (domain/renewals.py), and its live holder renews within it.
        taken_over = clock.now_ms()
        for job_id in list(part.holders):
            state = self.store.get(job_id)
            grace = after_handover(state, taken_over)
            if state is not None and grace is not None:
                part.absorb(state, grace)
        # The worker-lease index: what this partition holds (again), and the end of what it no longer holds.
        for rec in self.worker_leases.of_partition(p):
            state = self.store.get(rec.job_id)
            lease = state.lease if state is not None and state.job_id in part.holders else None
            if lease is None or lease.worker_id != rec.worker_id:
                # Held no more by that worker (its end was never published): end it. A lease this partition
                # holds is republished above by `observe`, whatever epoch the index shows.
                part.lease_news.append(ev.WorkerLeaseHeld(rec.worker_id, rec.job_id, rec.epoch, p,
                                                          rec.granted_at_ms, held=False))
        await self.publisher.publish_leases(part)
        # This partition's usage as the table says (the last owner's reports may be behind it).
        part.ledger.dirty |= part.ledger.tenants()
        await self.publisher.publish_usage(part)
        log.info("partition %d: marker %d, %d events read, %d jobs caught up, %d follow-ups re-sent, applied up to "
                 "offset %d, %d queued, redelivery window: %d grants, %d dead letters", p, marker, caught.read,
                 len(caught.states), len(caught.followups), part.applied_upto, len(part.index), len(part.grants),
                 len(part.deadlettered))
        return part

    def _read_back(self, p: int, marker: int) -> tuple[Any, set[int]]:
        """Blocking (a thread): the table's catch-up and what the redelivery window already produced."""
        boot = self.settings.kafka_bootstrap
        committed = redelivery.committed_offset(boot, scheduler_app_id(self.settings), self.commands, p)
        caught = catch_up(boot, self.events, p, self.codec, marker, self.store.get, self.store.get_schedule, committed)
        dead = redelivery.deadlettered_since(boot, commands_deadletter_topic(self.settings), p, committed)
        return caught, dead, committed
