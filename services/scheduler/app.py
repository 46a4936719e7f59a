"""The scheduler's Faust application, built by a factory (no module-global app).

One agent reads the commands topic; for each record, in this order:
  1. skip it if its offset is at or below `applied_upto` (its events are already on the events topic);
  2. decode (poison -> dead-letter topic), decide against the job table;
  3. produce its events to the same partition of the events topic, each with a `cmd-offset` header, and
     wait until they are acknowledged (acks=all);
  4. write the new job states and the partition's events-offset marker to the table (changelog);
  5. answer a RequestWork on the assignments topic.
A crash between any two steps loses nothing (the command was not committed, so it is redelivered) and
duplicates nothing (on assignment the owner reads the events topic's tail: the table catches up from its
marker and `applied_upto` comes from the last event's header). See README.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import faust
from faust.transport.drivers.aiokafka import Producer as AIOKafkaProducer

from spotreel.adapters.kafka import CMD_OFFSET_HEADER
from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.domain import events as ev
from spotreel.domain.commands import PreemptLease, ReleaseLease, RequestWork
from spotreel.domain.fairness import TenantPolicy, share
from spotreel.domain.leases import PREEMPTED_FOR, UNCLAIMED
from spotreel.domain.schedules import ScheduleState
from spotreel.domain.state import JobState
from spotreel.domain.renewals import after_handover
from spotreel.domain.retention import Retention
from spotreel.platform.topics import (assignments_topic, commands_topic, deadletter_topic, events_topic,
                                   pool_stats_topic, replies_topic, scheduler_app_id, tenant_usage_topic,
                                   worker_leases_topic)
from spotreel.settings import Settings
from spotreel.tracing import TRACEPARENT

from spotreel.services.scheduler import followups, redelivery, statecodec, taskdump
from spotreel.services.scheduler.catchup import catch_up
from spotreel.services.scheduler.fairshare import FairShareView, GlobalUsage, half_life_ms, usage_key
from spotreel.services.scheduler.handler import Handler
from spotreel.services.scheduler.metrics import Metrics
from spotreel.services.scheduler.partition import PartitionState
from spotreel.services.scheduler.poolstats import pool_stats, share_if_room
from spotreel.services.scheduler.preempting import PoolStatsView, budget_of, decide_pool, note_asked
from spotreel.services.scheduler.traces import JobTraces
from spotreel.services.scheduler.workerleases import WorkerLeaseIndex, later_grant, record_key

log = logging.getLogger("spotreel.scheduler")
# Jobs (and summaries) evicted per partition per stats tick at most (domain/retention.py): a backlog of due
# evictions (a restart after a long stop) is spread over ticks instead of blocking the loop.
EVICT_PER_TICK = 5000


def now_ms() -> int:
    return int(time.time() * 1000)


def appended_ms(msg: Any) -> int | None:
    """The broker's append time of a record (ms), or None when the topic stamps records with the producer's
    clock (CreateTime: a worker's clock must never judge its own lease)."""
    if getattr(msg, "timestamp_type", 0) != 1 or not msg.timestamp:
        return None
    return int(round(msg.timestamp * 1000))


def _meta_key(p: int) -> bytes:
    return b"~meta:%d" % p


def _schedule_key(schedule_id: str) -> bytes:
    # Schedules share the table (and its changelog partition = the schedule's partition) with the jobs.
    return b"~s:" + schedule_id.encode()


def key_partition(key: bytes, partitions: int) -> int | None:
    """The changelog partition of a table key: a job's, a summary's (~e:), a schedule's (~s:), a marker's."""
    if key.startswith(b"~meta:"):
        return int(key[6:])
    for prefix in (b"~s:", statecodec.SUMMARY_PREFIX):
        if key.startswith(prefix):
            return partition_for(key[len(prefix):], partitions)
    return None if key.startswith(b"~") else partition_for(key, partitions)


class JobTable(faust.Table):
    """The job table; tells the scheduler when Faust finished restoring it after a rebalance."""

    on_restored: Any = None

    async def on_recovery_completed(self, active_tps, standby_tps) -> None:
        await super().on_recovery_completed(active_tps, standby_tps)
        if self.on_restored is not None:
            await self.on_restored()


class IdempotentProducer(AIOKafkaProducer):
    """Faust's aiokafka producer with `enable_idempotence` (Faust turns it on only inside its transactions,
    which the scheduler does not use). Without it a batch that the broker appended but whose answer was lost
    (the broker killed mid-request) is sent again when aiokafka retries, and the events topic holds the job's
    events twice (seen once in the whole-system chaos test: `JobSubmitted has version 1, expected 3`). With it
    the broker drops the resent batch by its producer id and sequence number."""

    def _settings_extra(self) -> dict[str, Any]:
        return {**super()._settings_extra(), "acks": "all", "enable_idempotence": True}


class Scheduler:
    def __init__(self, settings: Settings, *, data_dir: Path | None = None, metrics_port: int = 0,
                 timer_interval: float = 0.05, stats_interval: float = 1.0, batch_max: int = 500,
                 batch_within: float = 0.010) -> None:
        self.settings = settings
        self.codec = Codec.default()
        self.metrics = Metrics()
        self.metrics_port = metrics_port
        self.parts: dict[int, PartitionState] = {}
        self._last_tick = time.monotonic()
        self.cache: dict[str, JobState | None] = {}
        self.schedule_cache: dict[str, ScheduleState | None] = {}
        self.batch_max = batch_max
        self.batch_within = batch_within
        self.worker_leases = WorkerLeaseIndex(settings, self.codec)
        # Usage of every partition and every tenant's plan (fairshare.py): DRF across the whole pool.
        self.fair = FairShareView(settings, self.codec)
        self.half_life_ms = half_life_ms(settings)
        # Priority preemption (preempting.py): the other partitions' pool-stats, and the budget.
        self.pool_view = PoolStatsView(settings, self.codec)
        self.preempt_budget = budget_of(settings)
        # Tracing (traces.py): traced jobs only; empty, and never looked at, while nothing is traced.
        self.traces = JobTraces()
        self.handler = Handler(self.codec, settings.partitions, self.get, get_schedule=self.get_schedule,
                               absorb_renewals=not settings.scheduler_persist_renewals,
                               progress_persist_ms=settings.scheduler_progress_persist_s * 1000,
                               worker_busy=lambda w: bool(self.worker_leases.held_by(w)),
                               usage=self.global_usage, policies=self.fair.policies)
        self.commands = commands_topic(settings)
        self.events = events_topic(settings)
        # Bounded state (domain/retention.py, eviction.py): the sweep never runs inside a batch or a rebuild.
        self.retention = Retention(settings.scheduler_retention_s * 1000, settings.scheduler_summary_retention_s * 1000)
        self.batch_lock = asyncio.Lock()
        self.rebuilding = False
        self.app = self._build_app(data_dir, timer_interval, stats_interval)

    # -- the table ---------------------------------------------------------------------------------------

    def get(self, job_id: str) -> JobState | None:
        if job_id in self.cache:
            return self.cache[job_id]
        raw = self.table.data.get(job_id.encode())
        if raw is None:
            # An evicted job is its summary (domain/retention.py), under its own key. Not cached: a summary is
            # rarely asked for, and as a JobState object it would cost as much memory as a whole job.
            summary = statecodec.loads_summary(job_id, self.table.data.get(statecodec.summary_key(job_id)))
            if summary is not None:
                return summary
        state = self.cache[job_id] = statecodec.loads(raw)
        return state

    def get_schedule(self, schedule_id: str) -> ScheduleState | None:
        if schedule_id not in self.schedule_cache:
            self.schedule_cache[schedule_id] = statecodec.loads_schedule(self.table.data.get(_schedule_key(schedule_id)))
        return self.schedule_cache[schedule_id]

    def put_schedule(self, p: int, state: ScheduleState) -> None:
        self.schedule_cache[state.schedule_id] = state
        self._put(p, _schedule_key(state.schedule_id), statecodec.dumps_schedule(state))

    def _put(self, p: int, key: bytes, value: bytes) -> None:
        self.table.data[key] = value
        self.table.send_changelog(p, key, value)

    def put_state(self, p: int, state: JobState) -> None:
        self.cache[state.job_id] = state
        self._put_job(p, state)

    def _put_job(self, p: int, state: JobState) -> None:
        if state.evicted:  # a summary that a late command changed (its version): it stays a summary
            self._put(p, statecodec.summary_key(state.job_id), statecodec.dumps_summary(state))
        else:
            self._put(p, state.job_id.encode(), statecodec.dumps(state))

    def _delete(self, p: int, key: bytes) -> None:
        """Remove a key from the table: a tombstone in the compacted changelog."""
        self.table.data.pop(key, None)
        getattr(self.table.data, "_key_partition", {}).pop(key, None)  # the memory store's restore index
        self.table.send_changelog(p, key, None)

    def put_marker(self, part: PartitionState) -> None:
        self._put(part.partition, _meta_key(part.partition), json.dumps({"events_offset": part.events_offset}).encode())

    def global_usage(self, part: PartitionState | None, now: int) -> GlobalUsage:
        """Each tenant's usage over all partitions: this instance's own partitions live, the others from
        their latest reports on `<prefix>.tenant-usage`."""
        local = {p: (lambda t, ps=ps, p=p: ps.ledger.report(t, p, now)) for p, ps in self.parts.items()}
        return GlobalUsage(self.fair, local, now, self.half_life_ms)

    # -- Faust wiring --------------------------------------------------------------------------------------

    def _build_app(self, data_dir: Path | None, timer_interval: float, stats_interval: float) -> faust.App:
        s = self.settings
        app = faust.App(
            scheduler_app_id(s),
            broker=f"kafka://{s.kafka_bootstrap}",
            store="memory://",
            datadir=str(data_dir or (s.data_dir / "scheduler" / scheduler_app_id(s))),
            autodiscover=False,
            web_enabled=False,
            web_host="127.0.0.1",
            topic_partitions=s.partitions,
            topic_replication_factor=s.kafka_rf,
            topic_disable_leader=True,
            table_standby_replicas=0,
            key_serializer="raw",
            value_serializer="raw",
            consumer_auto_offset_reset="earliest",
            broker_session_timeout=6.0,
            broker_heartbeat_interval=1.0,
            broker_commit_interval=0.5,
            producer_acks=-1,
            producer_linger=0.0,
            stream_wait_empty=True,
            table_cleanup_interval=3600.0,
        )
        app.transport.Producer = IdempotentProducer  # before anything asks for app.producer
        self.table = JobTable(app, name="jobs", partitions=s.partitions, key_type=bytes,
                              value_type=bytes, beacon=app.tables.beacon)
        app.tables.add(self.table)
        self.table.on_restored = self._restored
        topic = app.topic(self.commands, key_type=bytes, value_type=bytes, partitions=s.partitions)

        async def process(stream):
            # Whatever is buffered, up to batch_max, without waiting longer than batch_within for more.
            # Faust's take loop wakes every `within` even when nothing arrives: at 2 ms that alone kept an
            # idle scheduler at 0.12 core; at 10 ms it is 0.05, and dispatch latency did not move
            # (bench/README.md, Scheduler).
            async for batch in stream.take_events(self.batch_max, within=self.batch_within):
                async with self.batch_lock:
                    await self.on_batch(batch)

        app.agent(topic, name=f"{scheduler_app_id(s)}.commands")(process)
        app.timer(timer_interval)(self.fire_timers)
        app.timer(stats_interval)(self.publish_stats)
        app.timer(stats_interval)(self.evict)

        async def start_metrics() -> None:
            taskdump.install(asyncio.get_running_loop(), self.flow_state)
            if self.metrics_port:
                self.metrics.serve(self.metrics_port)

        app.task(start_metrics)
        return app

    # -- assignment ----------------------------------------------------------------------------------------

    async def _restored(self) -> None:
        self.rebuilding = True
        try:
            await self.on_assigned()
        finally:
            self.rebuilding = False

    async def on_assigned(self) -> None:
        if self.worker_leases._thread is None:  # noqa: SLF001 - started once, before the first rebuild
            await asyncio.to_thread(self.worker_leases.start)
        if not await asyncio.to_thread(self.worker_leases.caught_up.wait, 30.0):
            log.warning("worker-leases index not caught up after 30 s; going on with what it read")
        if self.fair._thread is None:  # noqa: SLF001 - started once, like the worker-leases index
            await asyncio.to_thread(self.fair.start)
        if self.pool_view._thread is None and self.preempt_budget.per_minute > 0:  # noqa: SLF001 - once
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
        self._forget_unowned(assigned)
        self.cache.clear()
        self.schedule_cache.clear()
        started = time.monotonic()
        for p in sorted(assigned - set(self.parts)):
            self.parts[p] = await self._rebuild(p)
        await self._seek_uncommitted(assigned)
        log.info("scheduler owns partitions %s (rebuilt in %.2fs)", sorted(assigned), time.monotonic() - started)

    def _forget_unowned(self, assigned: set[int]) -> None:
        """Drop the keys of partitions this process does not own from its memory. Faust's memory store forgets
        only the keys it restored, not those this process wrote; a stale copy kept while another owner
        evicted the job would outlive the tombstone once compaction drops it (delete.retention.ms), and come
        back to life if the partition returns here. The changelog restores an owned partition whole."""
        n = self.settings.partitions
        for key in [k for k in self.table.data.keys() if key_partition(k, n) not in assigned]:
            self.table.data.pop(key, None)

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
                    await self.app.consumer.seek(tp, low)
                    log.info("partition %d: no committed offset, reading from the log start %d", tp.partition, low)

    async def _rebuild(self, p: int) -> PartitionState:
        part = PartitionState(p)
        part.ledger.half_life_ms = self.half_life_ms
        part.evictions.policy = self.retention
        raw_meta = self.table.data.get(_meta_key(p))
        marker = json.loads(raw_meta)["events_offset"] if raw_meta else -1
        caught, part.deadlettered, committed = await asyncio.to_thread(self._read_back, p, marker)
        # Everything before the group's committed offset was read by an earlier owner: the log horizon of the
        # lease timers starts there, even when those commands produced no event (partition.py, `due`).
        part.read_upto = max(caught.applied_upto, committed - 1)
        part.grants = caught.grants
        # Follow-ups of the events past the marker may never have been sent: send them (again) first.
        await self._send_all([(self.commands, followups.key_of(c).encode(), self.codec.encode_message(c),
                               partition_for(followups.key_of(c), self.settings.partitions))
                              for c in caught.followups])
        for state in caught.states.values():
            self.put_state(p, state)
        for sched in caught.schedules.values():
            self.put_schedule(p, sched)
        part.applied_upto = caught.applied_upto
        part.events_offset = caught.events_offset
        if caught.states or caught.schedules:
            self.put_marker(part)
        n = self.settings.partitions
        for key in list(self.table.data.keys()):
            if key.startswith(b"~s:"):
                schedule_id = key[3:].decode()
                if partition_for(schedule_id, n) == p:
                    part.observe_schedule(None, self.get_schedule(schedule_id))
                continue
            if key.startswith(statecodec.SUMMARY_PREFIX):
                job_id = key[len(statecodec.SUMMARY_PREFIX):].decode()
                if partition_for(job_id, n) == p:
                    part.evictions.observe(self.get(job_id))
                continue
            if key.startswith(b"~") or partition_for(key, n) != p:
                continue
            part.observe(None, self.get(key.decode()))
        # The renewals the previous owner answered without persisting them are not in the table: every held
        # lease gets a full TTL from now (domain/renewals.py), and its live holder renews within it.
        taken_over = now_ms()
        for job_id in list(part.holders):
            state = self.get(job_id)
            grace = after_handover(state, taken_over)
            if state is not None and grace is not None:
                part.absorb(state, grace)
        # The worker-lease index: what this partition holds (again), and the end of what it no longer holds.
        for rec in self.worker_leases.of_partition(p):
            state = self.get(rec.job_id)
            lease = state.lease if state is not None and state.job_id in part.holders else None
            if lease is None or lease.worker_id != rec.worker_id:
                # Held no more by that worker (its end was never published): end it. A lease this partition
                # holds is republished above by `observe`, whatever epoch the index shows.
                part.lease_news.append(ev.WorkerLeaseHeld(rec.worker_id, rec.job_id, rec.epoch, p,
                                                          rec.granted_at_ms, held=False))
        await self._publish_leases(part)
        # This partition's usage as the table says (the last owner's reports may be behind it).
        part.ledger.dirty |= part.ledger.tenants()
        await self._publish_usage(part)
        log.info("partition %d: marker %d, %d events read, %d jobs caught up, %d follow-ups re-sent, applied up to "
                 "offset %d, %d queued, redelivery window: %d grants, %d dead letters", p, marker, caught.read,
                 len(caught.states), len(caught.followups), part.applied_upto, len(part.index), len(part.grants),
                 len(part.deadlettered))
        return part

    def _read_back(self, p: int, marker: int) -> tuple[Any, set[int]]:
        """Blocking (a thread): the table's catch-up and what the redelivery window already produced."""
        boot = self.settings.kafka_bootstrap
        committed = redelivery.committed_offset(boot, scheduler_app_id(self.settings), self.commands, p)
        caught = catch_up(boot, self.events, p, self.codec, marker, self.get, self.get_schedule, committed)
        dead = redelivery.deadlettered_since(boot, deadletter_topic(self.settings), p, committed)
        return caught, dead, committed

    # -- commands --------------------------------------------------------------------------------------------

    async def on_batch(self, batch: list[Any]) -> None:
        """The commands Faust had buffered (several partitions), in 4 phases; nothing is awaited per command:
          1. decide each one against the cache (which already holds the earlier commands' results) and
             send its events, each with its `cmd-offset` header;
          2. await every event's ack (acks=all);
          3. send the follow-up commands (followups.py) and dead letters, await their acks;
          4. write the new states and each partition's marker to the table, send the answers.
        Only then does Faust ack the batch (so its offsets may be committed). The crash proof of README.md
        holds per command: the producer keeps a partition's records in order (aiokafka has one batch in
        flight per partition), so the events that are durable after a crash are a prefix, catch-up's
        `applied_upto` is the last command whose events all landed, and anything after it is redelivered."""
        producer = self.app.producer
        sends: list[Any] = []  # event send futures, with their partition
        writes: list[tuple[int, Any]] = []
        after_acks: list[tuple] = []  # (topic, key, value, partition[, headers])
        answers: list[tuple[Any, Any]] = []
        replies: list[Any] = []  # send futures of renewal answers that are not events
        marked: set[int] = set()
        for event in batch:
            msg = event.message
            p = msg.partition
            part = self.parts.get(p)
            if part is None:  # cannot happen after on_assigned; refuse to write without the catch-up
                raise RuntimeError(f"command on partition {p} before its state was rebuilt")
            appended = appended_ms(msg)
            part.read_log(msg.offset, appended)
            if msg.offset <= part.applied_upto:
                self.metrics.skipped.inc()
                # Its events are durable, but its answer may not be: a RequestWork is answered again.
                again = self.handler.reanswer(part, msg.value, now_ms())
                if again is not None:
                    answers.append((again, msg, None))
                continue
            given = msg.headers
            started = time.time_ns() if given else None  # a span's start, only if the record may be traced
            out = self.handler.handle(part, msg.topic, msg.offset, msg.key, msg.value, now_ms(), appended)
            self.metrics.commands.inc()
            traced = None
            if given or self.traces.by_job:  # the only per-command cost of tracing when nothing is traced
                traced = self.traces.on_command(given, out, p, msg.offset, started)
            if out.deadletter is not None:
                if msg.offset in part.deadlettered:  # redelivered after a crash: its dead letter is there
                    self.metrics.skipped.inc()
                    continue
                part.deadlettered.add(msg.offset)
                self.metrics.deadletters.labels(out.deadletter["reason"]).inc()
                log.warning("dead-lettered %s[%d]@%d: %s", msg.topic, p, msg.offset, out.deadletter["detail"])
                value = self.codec.encode("spotreel.v1.DeadLetteredCommand", out.deadletter)
                after_acks.append((deadletter_topic(self.settings), msg.key, value, p,
                                   [(CMD_OFFSET_HEADER, str(msg.offset).encode())]))
                continue
            if out.reply is not None:
                # Nothing durable to wait for: the deadline lives in memory, and a new owner grants a TTL.
                reply = out.reply
                replies.append(await producer.send(replies_topic(self.settings), reply.job_id.encode(),
                                                   self.codec.encode_message(reply), p, None, None))
                part.absorb(out.reply_to, (reply.epoch, reply.lease_expires_at_ms), reply)
                self.metrics.renewals_absorbed.inc()
            if out.events:
                headers = [(CMD_OFFSET_HEADER, str(msg.offset).encode())]
                if traced is not None:
                    headers.append((TRACEPARENT, traced.encode()))
                for e in out.events:
                    key = (getattr(e, "job_id", None) or e.schedule_id).encode()
                    sends.append((p, await producer.send(self.events, key, self.codec.encode_message(e), p, None,
                                                         headers)))
                    if isinstance(e, (ev.CommandRejected, ev.ScheduleCommandRejected)):
                        self.metrics.rejections.labels(e.reason).inc()
                    elif isinstance(e, ev.LeaseExpired):
                        self.metrics.observe_expiry(out.states[e.job_id][0], e)
                marked.add(p)
            part.applied_upto = msg.offset
            worker = getattr(out.command, "worker_id", None)
            if worker is not None and not isinstance(out.command, RequestWork):
                part.seen_worker(worker, now_ms())
            for e in out.events:
                if isinstance(e, ev.CheckpointRecorded):
                    part.observe_checkpoint(out.states[e.job_id][1].pool, e.duration_ms)
                elif isinstance(e, ev.JobLeased):
                    self.metrics.observe_lease(out.states[e.job_id][0], e)
                elif isinstance(e, (ev.LeaseExpired, ev.LeaseReleased)):
                    self.metrics.observe_lease_end(out.states[e.job_id][0], e)
                    if isinstance(e, ev.LeaseReleased) and e.reason == PREEMPTED_FOR:
                        part.freed[e.worker_id] = e.at_ms  # preempting.py: free until its next lease
                elif isinstance(e, ev.JobSucceeded):
                    self.metrics.observe_success(out.states[e.job_id][1], e.at_ms)
            for before, after in out.states.values():
                if after.is_terminal:
                    self.metrics.forget(after.job_id)
                self.cache[after.job_id] = after
                writes.append((p, after))
                part.observe(before, after)
            for before, sched in out.schedules.values():
                self.schedule_cache[sched.schedule_id] = sched
                writes.append((p, sched))
                part.observe_schedule(before, sched)
            for command in out.followups:
                key = followups.key_of(command)
                after_acks.append((self.commands, key.encode(), self.codec.encode_message(command),
                                   partition_for(key, self.settings.partitions)))
            if out.answer is not None:
                answers.append((out.answer, msg, traced))
                if isinstance(out.answer, ev.WorkAssigned):
                    # Faust rereads the uncommitted tail after a rebalance: answer it from here again.
                    part.remember_grant(out.answer.request_id,
                                        next(e for e in out.events if isinstance(e, ev.JobLeased)))
        for p, fut in sends:
            meta = await fut
            part = self.parts[p]
            part.events_offset = max(part.events_offset, meta.offset)
        await self._send_all(after_acks)
        for p, state in writes:
            if isinstance(state, JobState):
                self._put_job(p, state)
            else:
                self._put(p, _schedule_key(state.schedule_id), statecodec.dumps_schedule(state))
        for p in marked:
            self.put_marker(self.parts[p])
        answered = []
        for answer, msg, traced in answers:
            worker = answer.worker_id
            partition = partition_for(worker, self.settings.partitions)
            answered.append((msg, await producer.send(assignments_topic(self.settings), worker.encode(),
                                                      self.codec.encode_message(answer), partition, None,
                                                      [(TRACEPARENT, traced.encode())] if traced else None)))
        for fut in replies:
            await fut
        for part in self.parts.values():
            await self._publish_leases(part)
            await self._publish_usage(part)
        for msg, fut in answered:
            await fut
            if msg.timestamp:
                self.metrics.dispatch_latency.observe(max(0.0, time.time() - msg.timestamp))

    async def _publish_leases(self, part: PartitionState) -> None:
        """Grants and ends of leases to `<prefix>.worker-leases` (workerleases.py), into the local index at
        once: the next RequestWork of that worker is judged by it without waiting to read it back."""
        news, part.lease_news = part.lease_news, []
        if not news:
            return
        topic = worker_leases_topic(self.settings)
        for rec in news:
            self.worker_leases.apply(rec)
        await self._send_all([(topic, record_key(r.worker_id, r.job_id), self.codec.encode_message(r),
                               partition_for(r.worker_id, self.settings.partitions)) for r in news])

    async def _publish_usage(self, part: PartitionState) -> None:
        """The partition's changed tenant usage to `<prefix>.tenant-usage` (fairshare.py), into the local view
        at once. Not awaited: a lost report is replaced by the next one, or by a new owner's after a crash."""
        reports = part.ledger.take_reports(part.partition, now_ms())
        if not reports:
            return
        topic = tenant_usage_topic(self.settings)
        for r in reports:
            self.fair.apply(r)
            # The send is queued here; its ack is not waited for.
            await self.app.producer.send(topic, usage_key(r.tenant, r.partition), self.codec.encode_message(r),
                                         partition_for(r.tenant, self.settings.partitions), None, None)

    async def _release_double_grants(self, p: int, part: PartitionState) -> None:
        """Two partitions granted one worker in the same moment: the later grant's owner hands its lease back
        (unclaimed; refused by the domain if the worker already acted on it)."""
        for job_id, worker in list(part.workers_of.items()):
            held = self.worker_leases.held_by(worker)
            if len(held) < 2:
                continue
            mine = next((r for r in held if r.job_id == job_id and r.partition == p), None)
            if mine is None or not any(later_grant(mine, o) for o in held if o.job_id != job_id):
                continue
            command_id = f"double-grant:{job_id}:e{mine.epoch}"
            if command_id in part.double_released:
                continue
            part.double_released.add(command_id)
            log.warning("worker %s holds two leases; handing back %s epoch %d (the later grant)", worker, job_id,
                        mine.epoch)
            command = ReleaseLease(command_id, job_id, mine.epoch, worker, UNCLAIMED)
            await self.app.producer.send(self.commands, job_id.encode(), self.codec.encode_message(command), p,
                                         None, None)

    async def _send_all(self, records: list[tuple]) -> None:
        """Send (topic, key, value, partition[, headers]) records, then await every ack."""
        futures = [await self.app.producer.send(r[0], r[1], r[2], r[3], None, r[4] if len(r) > 4 else None)
                   for r in records]
        for fut in futures:
            await fut

    def flow_state(self) -> str:
        consumer = self.app.consumer
        thread = getattr(consumer, "_thread", None)
        inner = getattr(thread, "_consumer", None)
        paused = inner.paused() if inner is not None else "?"
        positions = {}
        if inner is not None:
            assignment = inner._subscription.subscription.assignment  # noqa: SLF001
            for tp in assignment.tps:
                st = assignment.state_value(tp)
                positions[f"{tp.topic.rsplit('.', 1)[-1]}/{tp.partition}"] = (
                    st.has_valid_position and st.position, st.paused, st.awaiting_reset, st.highwater)
        return (f"parts={ {p: (s.applied_upto, s.events_offset) for p, s in self.parts.items()} } "
                f"flow_active={consumer.flow_active} active={consumer._active_partitions} "  # noqa: SLF001
                f"paused={paused} read_offset={dict(consumer._read_offset)} "  # noqa: SLF001
                f"committed={dict(consumer._committed_offset)} positions={positions}")  # noqa: SLF001

    # -- timers and stats ------------------------------------------------------------------------------------

    async def evict(self) -> None:
        """Bounded state (domain/retention.py): terminal jobs past their retention leave the table (summary
        first, then the job's tombstone, in one changelog partition), summaries past theirs follow. Not an
        event: the table is derived, and catch-up treats a summary as the job's state, so it never folds an
        evicted job's JobSubmitted again. Runs between batches (the lock), never during a rebuild, and only on
        partitions this process owns now; at most `EVICT_PER_TICK` of each per tick."""
        if self.rebuilding or self.batch_lock.locked() or not self.parts:
            return
        async with self.batch_lock:
            owned = self._owned()
            for p, part in list(self.parts.items()):
                if p in owned:
                    self._evict_partition(p, part, now_ms())

    def _owned(self) -> set[int]:
        return {tp.partition for tp in self.app.consumer.assignment() if tp.topic == self.commands}

    def _evict_partition(self, p: int, part: PartitionState, now: int) -> None:
        stubs, forgotten = part.evictions.sweep(self.get, now, EVICT_PER_TICK)
        for stub in stubs:
            self._put(p, statecodec.summary_key(stub.job_id), statecodec.dumps_summary(stub))
            self._delete(p, stub.job_id.encode())
            self.cache.pop(stub.job_id, None)
            part.fired.pop(stub.job_id, None)
        for job_id in forgotten:
            self._delete(p, statecodec.summary_key(job_id))
            self.cache.pop(job_id, None)
        self.metrics.evicted.labels("job").inc(len(stubs))
        self.metrics.evicted.labels("summary").inc(len(forgotten))

    async def fire_timers(self) -> None:
        now = now_ms()
        # After a pause (the process was stopped, or starved of CPU) the high watermarks are as old as the
        # last fetch before it: until the next tick, judge every partition by how far its log was read.
        tick = time.monotonic()
        paused = tick - self._last_tick > 1.0
        self._last_tick = tick
        for p, part in list(self.parts.items()):
            horizon = part.log_ms if paused else self._lease_horizon(p, part)
            for timer in part.due(now, self.get, self.get_schedule, horizon):
                command = timer.command()
                await self.app.producer.send(self.commands, timer.key.encode(), self.codec.encode_message(command),
                                             p, None, None)

    def _lease_horizon(self, p: int, part: PartitionState) -> int | None:
        """None when partition `p` has nothing unread (every lease deadline up to now can be judged), else
        the append time of the newest command applied: deadlines after it wait for the backlog (partition.py,
        `due`). The high watermark comes from the last fetch, so "caught up" may be a little optimistic;
        that only lets an ExpireLease through that the log order then judges correctly anyway."""
        high = self._highwater(p)
        if high is not None and part.read_upto + 1 >= high:
            return None
        return part.log_ms

    def _highwater(self, p: int) -> int | None:
        for tp in self.app.consumer.assignment():
            if tp.topic == self.commands and tp.partition == p:
                return self.app.consumer.highwater(tp)
        return None

    async def publish_stats(self) -> None:
        now = now_ms()
        for p, part in list(self.parts.items()):
            await self._release_double_grants(p, part)
            for tenant, used in part.ledger.used_s.items():
                self.metrics.tenant_gpu_seconds.labels(tenant, str(p)).set(used)
            for (tenant, pool), wasted in part.ledger.wasted_by_pool.items():
                self.metrics.tenant_wasted_gpu_seconds.labels(tenant, pool, str(p)).set(wasted)
            usage, policies = self.global_usage(part, now), self.fair.policies()
            for stats in pool_stats(part, now, lambda t: share_if_room(usage.get(t), policies.get(t))):
                self.metrics.queue_depth.labels(stats.pool, str(p)).set(stats.queued)
                await self.app.producer.send(pool_stats_topic(self.settings), f"{stats.pool}/{p}".encode(),
                                             self.codec.encode_message(stats), p, None, None)
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
        if self.preempt_budget.per_minute <= 0 or not self.parts:
            return
        parts = dict(self.parts)
        pools = {pool for part in parts.values() for pool in part.holders.values()}
        others = self.pool_view.records()
        usage, policies = self.global_usage(None, now), self.fair.policies()
        for pool in sorted(pools):
            chosen = decide_pool(pool, parts, others, now, self.preempt_budget, self.get,
                                 lambda w: bool(self.worker_leases.held_by(w)), self.settings.preempt_fair_share_ratio,
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
