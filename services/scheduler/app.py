"""The scheduler's Faust application, built by a factory (no module-global app): `Scheduler(settings)`.

One agent reads `<prefix>.commands` and hands each batch to the pipeline; timers drive the timer tick, the
stats and eviction ticks and the recovery watch; the job table tells the scheduler when Faust restored it
after a rebalance.
The work itself lives in parts named for it, each built by `Scheduler` with what it depends on:
  table.py       Store: the job table's read-through cache, writes and markers (JobTable, keys);
  ordering.py    InOrder: commands applied in offset order, a hole read again;
  publishing.py  Publisher: worker leases, tenant usage, pool stats, "send these and await the acks";
  pipeline.py    Pipeline: `on_batch`, the per-command I/O order that makes the scheduler exactly-once;
  timers.py      Timers: the timer tick (lease deadlines, queue timeouts, schedules);
  stats.py       Stats and Eviction: the stats tick (pool stats, double grants, preemption), the eviction tick;
  rebuild.py     Rebuild: on assignment, a partition's state from the table and the events topic's tail;
  recoverywatch.py  a changelog partition Faust's recovery stopped reading is sought again.
README.md says why the order is what it is."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import faust
from faust.transport.drivers.aiokafka import Producer as AIOKafkaProducer

from spotreel.codec import Codec
from spotreel.domain.retention import Retention
from spotreel.domain.state import JobState
from spotreel.platform.topics import commands_topic, events_topic, scheduler_app_id
from spotreel.config.settings import Settings

from spotreel.services.scheduler import taskdump
from spotreel.services.scheduler.fairshare import FairShareView, UsageOfAll, half_life_ms
from spotreel.services.scheduler.handler import Handler
from spotreel.services.scheduler.metrics import Metrics
from spotreel.services.scheduler.ordering import InOrder
from spotreel.services.scheduler.partition import PartitionState
from spotreel.services.scheduler.command_batches import Pipeline
from spotreel.services.scheduler.policies import dispatch_config, resume_hold_ms
from spotreel.services.scheduler.preempting import PoolStatsView, budget_of
from spotreel.services.scheduler.rebuild import Rebuild
from spotreel.services.scheduler.recoverywatch import INTERVAL_S, RecoveryWatch
from spotreel.services.scheduler.publishing import Publisher
from spotreel.services.scheduler.stats import Eviction, Stats
from spotreel.services.scheduler.table import JobTable, Store
from spotreel.services.scheduler.timers import Timers
from spotreel.services.scheduler.traces import JobTraces
from spotreel.services.scheduler.workerleases import WorkerLeaseIndex


class IdempotentProducer(AIOKafkaProducer):
    """Faust's aiokafka producer with `enable_idempotence` (Faust turns it on only inside its transactions,
    which the scheduler does not use). Without it a batch that the broker appended but whose answer was lost
    (the broker killed mid-request) is sent again when aiokafka retries, and the events topic holds the job's
    events twice (seen once in the whole-system chaos test: `JobSubmitted has version 1, expected 3`). With it
    the broker drops the resent batch by its producer id and sequence number. `_settings_extra` is Faust's
    hook for the aiokafka producer's keyword arguments; Faust has no public setting for idempotence."""

    def _settings_extra(self) -> dict[str, Any]:
        return {**super()._settings_extra(), "acks": "all", "enable_idempotence": True}


class Scheduler:
    """One scheduler process: the Faust app (`self.app`), its job table, and the parts that do the work, each
    given what it depends on (table.py, ordering.py, publishing.py, pipeline.py, timers.py, stats.py,
    rebuild.py). `parts` (partition -> PartitionState, the owned partitions) is the one mutable map they
    share; only `Rebuild` adds and removes partitions in it."""

    def __init__(self, settings: Settings, *, data_dir: Path | None = None, metrics_port: int = 0,
                 timer_interval: float = 0.05, stats_interval: float = 1.0, batch_max: int = 500,
                 batch_within: float = 0.010) -> None:
        self.settings = settings
        self.codec = Codec.default()
        self.metrics = Metrics()
        self.metrics_port = metrics_port
        self.parts: dict[int, PartitionState] = {}
        self.batch_max = batch_max
        self.batch_within = batch_within
        self.commands = commands_topic(settings)
        self.events = events_topic(settings)
        self.batch_lock = asyncio.Lock()
        self.app = self._new_app(data_dir)
        self.table = JobTable(self.app, name="jobs", partitions=settings.partitions, key_type=bytes,
                              value_type=bytes, beacon=self.app.tables.beacon)
        self.app.tables.add(self.table)
        self.store = Store(self.table, settings.partitions)
        self.worker_leases = WorkerLeaseIndex(settings, self.codec)
        # Usage of every partition and every tenant's plan (fairshare.py): DRF across the whole pool.
        self.fair = FairShareView(settings, self.codec)
        self.usage = UsageOfAll(self.fair, self.parts, half_life_ms(settings))
        # Priority preemption (preempting.py): the other partitions' pool-stats, and the budget.
        self.pool_view = PoolStatsView(settings, self.codec)
        budget = budget_of(settings)
        # Tracing (traces.py): traced jobs only; empty, and never looked at, while nothing is traced.
        self.traces = JobTraces()
        self.handler = Handler(self.codec, settings.partitions, self.store.get, get_schedule=self.store.get_schedule,
                               absorb_renewals=not settings.scheduler_persist_renewals,
                               progress_persist_ms=settings.scheduler_progress_persist_s * 1000,
                               worker_busy=lambda w: bool(self.worker_leases.held_by(w)),
                               usage=self.usage, policies=self.fair.policies,
                               dispatch_config=dispatch_config(settings), resume_hold_ms=resume_hold_ms(settings))
        # Bounded state (domain/retention.py, eviction.py): the sweep never runs inside a batch or a rebuild.
        self.retention = Retention(settings.scheduler_retention_s * 1000, settings.scheduler_summary_retention_s * 1000)
        self.order = InOrder(self.app, self.commands, self.parts, self.metrics)
        self.publisher = Publisher(self.app, settings, self.codec, self.metrics, self.fair, self.worker_leases,
                                   self.usage, budget)
        self.pipeline = Pipeline(self.app, settings, self.codec, self.handler, self.parts, self.store, self.order,
                                 self.publisher, self.metrics, self.traces)
        self.timers = Timers(self.app, self.commands, self.codec, self.parts, self.store, self.order)
        self.stats = Stats(self.app, settings, self.codec, self.commands, self.parts, self.metrics, self.publisher,
                           self.usage, self.fair, self.pool_view, self.worker_leases, budget)
        self.rebuild = Rebuild(self.app, settings, self.codec, self.parts, self.store, self.publisher, self.metrics,
                               self.worker_leases, self.fair, self.pool_view, budget, self.retention,
                               half_life_ms(settings))
        self.eviction = Eviction(self.app, self.commands, self.parts, self.store, self.metrics, self.batch_lock,
                                 lambda: self.rebuild.rebuilding)
        self._wire(timer_interval, stats_interval)

    # The parts' entry points, for the agent, the timers and the tests that drive one process's loop.
    async def on_batch(self, batch: list[Any]) -> None:
        await self.pipeline.on_batch(batch)

    def get(self, job_id: str) -> JobState | None:
        return self.store.get(job_id)

    async def evict(self) -> None:
        await self.eviction.evict()

    # -- Faust wiring --------------------------------------------------------------------------------------

    def _new_app(self, data_dir: Path | None) -> faust.App:
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
            topic_disable_leader=True,
            table_standby_replicas=0,
            key_serializer="raw",
            value_serializer="raw",
            consumer_auto_offset_reset="earliest",
            broker_session_timeout=6.0,
            broker_heartbeat_interval=1.0,
            broker_commit_interval=0.5,
            producer_acks=-1,
            producer_linger=s.scheduler_producer_linger_ms / 1000,
            stream_wait_empty=True,
            table_cleanup_interval=3600.0,
        )
        app.transport.Producer = IdempotentProducer  # before anything asks for app.producer
        return app

    def _wire(self, timer_interval: float, stats_interval: float) -> None:
        app, s = self.app, self.settings
        self.table.on_restored = self.rebuild.restored
        topic = app.topic(self.commands, key_type=bytes, value_type=bytes, partitions=s.partitions)

        async def process(stream):
            # Whatever is buffered, up to batch_max, without waiting longer than batch_within for more.
            # Faust's take loop wakes every `within` even when nothing arrives: a shorter wait costs an idle
            # scheduler CPU for no gain in dispatch latency (bench/results/history.md, "scheduler idle cost").
            async for batch in stream.take_events(self.batch_max, within=self.batch_within):
                async with self.batch_lock:
                    await self.pipeline.on_batch(batch)

        app.agent(topic, name=f"{scheduler_app_id(s)}.commands")(process)
        app.timer(timer_interval)(self.timers.fire_timers)
        app.timer(stats_interval)(self.stats.publish_stats)
        app.timer(stats_interval)(self.eviction.evict)
        self.recovery_watch = RecoveryWatch(app, self.flow_state, self.metrics.recovery_nudges.inc)
        app.timer(INTERVAL_S)(self.recovery_watch.check)

        async def start_metrics() -> None:
            taskdump.install(asyncio.get_running_loop(), self.flow_state)
            if self.metrics_port:
                self.metrics.serve(self.metrics_port)

        app.task(start_metrics)

    def flow_state(self) -> str:
        """One line for the task dump (taskdump.py, `kill -USR2`): what each owned partition applied, and where
        Faust's consumer and the aiokafka consumer under it stand.

        A diagnostic only, and the one place in the scheduler that reads Faust's and aiokafka's private fields,
        on purpose: Faust has no public view of its active partitions, read offsets or committed offsets, and
        aiokafka's fetch position is public only as a coroutine (`position()`) on the consumer thread's own
        loop, which a signal handler on the scheduler's loop cannot await. What is public is used as such
        (`flow_active`, aiokafka's `assignment()`, `paused()` and `highwater()`). Every private read is
        guarded: after an upgrade that renames one, the line shows `?` where it was instead of breaking the
        dump."""
        consumer = self.app.consumer
        inner = getattr(getattr(consumer, "_thread", None), "_consumer", None)  # the aiokafka consumer
        paused: Any = "?"
        positions: dict[str, Any] = {}
        if inner is not None:
            paused = inner.paused()
            state = getattr(getattr(getattr(inner, "_subscription", None), "subscription", None), "assignment", None)
            for tp in inner.assignment():
                st = state.state_value(tp) if state is not None else None
                positions[f"{tp.topic.rsplit('.', 1)[-1]}/{tp.partition}"] = (
                    (st.has_valid_position and st.position) if st is not None else "?", tp in paused,
                    getattr(st, "awaiting_reset", "?"), inner.highwater(tp))

        def private(name: str) -> Any:
            value = getattr(consumer, name, "?")
            return dict(value) if isinstance(value, dict) or hasattr(value, "items") else value

        return (f"parts={ {p: (s.applied_upto, s.events_offset) for p, s in self.parts.items()} } "
                f"flow_active={consumer.flow_active} active={private('_active_partitions')} "
                f"paused={paused} read_offset={private('_read_offset')} "
                f"committed={private('_committed_offset')} positions={positions}")
