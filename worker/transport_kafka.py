"""Kafka directly, for internal pools: no gateway between the worker and the scheduler.

Dispatch as the gateway does it (services/gateway/workbus.py): RequestWork goes to a partition that the
compacted pool-stats topic shows with queued work (then the others in a ring starting at the worker's own);
the owner answers on `<prefix>.assignments`, partition `partition_for(worker_id)`, so a worker reads exactly
one partition of it. Fenced commands are produced keyed by job id to the owner's partition, and the verdict
is the event naming the command as its `causation_id`, or a CommandRejected naming it, on the job's events
partition. The worker never joins a consumer group: partitions are assigned explicitly and nothing is
committed, so thousands of spot workers coming and going cause no rebalance. Cancel and drain instructions
come from the same events partition (CancelRequested / PauseRequested for the lease's epoch, JobResumed).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import replace
from typing import Any, Callable

from spotreel.adapters.kafka import assignments_topic, produce_command, producer
from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.domain import commands as cmd
from spotreel.domain import events as ev
from spotreel.domain.leases import renew_in_s
from spotreel.infra.topics import events_topic, pool_stats_topic
from spotreel.settings import Settings
from spotreel.worker.transport import Lease, TransportError, Verdict, WorkerProfile, judge

log = logging.getLogger("spotreel.worker.kafka")

# How far back the job's events partition is read when a lease starts: far enough to see a cancel or pause
# requested between the grant and this worker's first look.
_EVENTS_LOOKBACK = 2000


class _Waiter:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None

    def settle(self, value: Any) -> None:
        if not self.done.is_set():
            self.value = value
            self.done.set()


class KafkaTransport:
    def __init__(self, settings: Settings, profile: WorkerProfile, *, verdict_seconds: float = 10.0,
                 dispatch_answer_seconds: float = 5.0, idle_pass_seconds: float = 1.0,
                 heartbeat_seconds: float = 10.0, progress_seconds: float = 5.0, codec: Codec | None = None) -> None:
        self.settings = settings
        self.profile = profile
        self.codec = codec or Codec.default()
        self.verdict_seconds = verdict_seconds
        self.dispatch_answer_seconds = dispatch_answer_seconds
        self.idle_pass_seconds = idle_pass_seconds
        self.cadence = (heartbeat_seconds, progress_seconds)
        self.assignments = assignments_topic(settings)
        self.events = events_topic(settings)
        self.stats_topic = pool_stats_topic(settings)
        self._lock = threading.Lock()
        self._answers: dict[str, _Waiter] = {}
        self._verdicts: dict[str, _Waiter] = {}
        self._queued: dict[str, dict[int, int]] = defaultdict(dict)
        # job id -> (epoch, instructions); only the jobs this worker holds a lease on are decoded.
        self._jobs: dict[bytes, tuple[int, dict[str, bool]]] = {}
        self._events_assigned: set[int] = set()  # touched by the consumer thread only
        self._ops: list[tuple[Callable[[Any], None], threading.Event]] = []
        self._stop = threading.Event()
        self._producer = producer(settings, **{"message.timeout.ms": 10_000})
        self._consumer = None
        self._thread: threading.Thread | None = None
        self._ids = 0

    # -- lifecycle ---------------------------------------------------------------------------------------

    def _start(self, timeout: float = 15.0) -> None:
        if self._thread is not None:
            return
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

        c = Consumer({"bootstrap.servers": self.settings.kafka_bootstrap,
                      # Never used to join a group (assign only, nothing committed); librdkafka wants one.
                      "group.id": f"{self.settings.topic_prefix}.worker.{self.profile.worker_id}",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 10, "fetch.error.backoff.ms": 50})
        mine = partition_for(self.profile.worker_id, self.settings.partitions)
        try:
            # An explicit end offset: an answer produced after this returns is never skipped.
            end = c.get_watermark_offsets(TopicPartition(self.assignments, mine), timeout=timeout)[1]
        except KafkaException as exc:
            c.close()
            raise TransportError(f"kafka {self.settings.kafka_bootstrap}: {exc}") from None
        tps = [TopicPartition(self.assignments, mine, end)]
        tps += [TopicPartition(self.stats_topic, p, OFFSET_BEGINNING) for p in range(self.settings.partitions)]
        c.assign(tps)
        self._consumer = c
        self._thread = threading.Thread(target=self._run, name="worker-kafka", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        self._producer.flush(5)

    def _on_consumer(self, op: Callable[[Any], None], timeout: float = 15.0) -> None:
        """Run `op(consumer)` on the consumer thread (the only one that touches the consumer)."""
        done = threading.Event()
        with self._lock:
            self._ops.append((op, done))
        if not done.wait(timeout):
            raise TransportError("kafka consumer thread did not answer")

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                ops, self._ops = self._ops, []
            for op, done in ops:
                try:
                    op(self._consumer)
                except Exception:
                    log.exception("worker consumer operation failed")
                done.set()
            try:
                msgs = self._consumer.consume(500, 0.05)
            except Exception:
                log.exception("worker consume failed")
                continue
            for msg in msgs:
                if msg.error():
                    continue
                try:
                    self._route(msg)
                except Exception:
                    log.exception("worker could not route a record of %s", msg.topic())

    def _route(self, msg: Any) -> None:
        topic = msg.topic()
        if topic == self.assignments:
            answer = self.codec.decode_message(msg.value())
            if answer.worker_id == self.profile.worker_id:
                self._settle(self._answers, answer.request_id, answer)
        elif topic == self.events:
            key = msg.key() or b""
            with self._lock:
                watched = self._jobs.get(key)
            if watched is None:
                return
            event = self.codec.decode_message(msg.value())
            self._instruct(key, watched[0], event)
            self._settle(self._verdicts, getattr(event, "causation_id", None), event)
            if isinstance(event, ev.CommandRejected):
                self._settle(self._verdicts, event.command_id, event)
        elif msg.value() is not None:
            stats = self.codec.decode_message(msg.value())
            with self._lock:
                self._queued[stats.pool][stats.partition] = stats.queued

    def _instruct(self, key: bytes, epoch: int, event: Any) -> None:
        with self._lock:
            flags = self._jobs[key][1]
            if isinstance(event, ev.CancelRequested) and event.epoch == epoch:
                flags["cancel"] = True
            elif isinstance(event, ev.PauseRequested) and event.epoch == epoch:
                flags["drain"] = True
            elif isinstance(event, ev.JobResumed):
                flags["drain"] = False

    def _settle(self, table: dict[str, _Waiter], key: str | None, value: Any) -> None:
        if key is None:
            return
        with self._lock:
            waiter = table.pop(key, None)
        if waiter is not None:
            waiter.settle(value)

    def _next_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}-{self.profile.worker_id}-{self._ids}-{uuid.uuid4().hex[:8]}"

    def _send(self, command: Any, partition: int | None = None) -> None:
        from confluent_kafka import KafkaException

        try:
            produce_command(self._producer, self.settings, self.codec, command, partition)
            left = self._producer.flush(10)
        except (KafkaException, BufferError) as exc:
            raise TransportError(f"kafka produce: {exc}") from None
        if left:
            raise TransportError("kafka produce: not acknowledged within 10 s")

    # -- dispatch ----------------------------------------------------------------------------------------

    def _partitions_with_work(self) -> list[int]:
        with self._lock:
            totals: dict[int, int] = defaultdict(int)
            for pool, parts in self._queued.items():
                if pool.rsplit("@", 1)[0] in self.profile.models:
                    for p, n in parts.items():
                        if n > 0:
                            totals[p] += n
        return sorted(totals, key=lambda p: (-totals[p], p))

    def _order(self, tried: set[int]) -> list[int]:
        n = self.settings.partitions
        start = partition_for(self.profile.worker_id, n)
        ring = [(start + i) % n for i in range(n)]
        seen: list[int] = []
        for p in [*self._partitions_with_work(), *ring]:
            if p not in tried and p not in seen and p < n:
                seen.append(p)
        return seen

    def register(self) -> dict[str, Any]:
        # Nothing to register with: the scheduler learns about a worker from its RequestWork.
        self._start()
        hb, pr = self.cadence
        return {"worker_id": self.profile.worker_id, "heartbeat_seconds": hb, "progress_seconds": pr}

    def lease(self, wait_seconds: float, draining: bool = False, lease_ttl_ms: int | None = None) -> Lease | None:
        self._start()
        p = self.profile
        ttl = lease_ttl_ms or 30_000
        deadline = time.monotonic() + wait_seconds
        tried: set[int] = set()
        while True:
            order = self._order(tried)
            if not order:
                tried.clear()
                pause_until = min(deadline, time.monotonic() + self.idle_pass_seconds)
                while time.monotonic() < pause_until and not self._partitions_with_work() and not self._stop.is_set():
                    time.sleep(0.05)
                if time.monotonic() >= deadline or self._stop.is_set():
                    return None
                continue
            part = order[0]
            rid = self._next_id("rw")
            waiter = _Waiter()
            with self._lock:
                self._answers[rid] = waiter
            try:
                self._send(cmd.RequestWork(rid, p.worker_id, p.gpu_type, p.models, p.warm_models, draining, ttl,
                                           int(time.time() * 1000)), partition=part)
                left = deadline - time.monotonic()
                waiter.done.wait(max(0.5, min(self.dispatch_answer_seconds, left + 0.5)))
            finally:
                with self._lock:
                    self._answers.pop(rid, None)
            answer = waiter.value
            if isinstance(answer, ev.WorkAssigned):
                hb, pr = self.cadence
                lease = replace(Lease.from_answer(answer), heartbeat_seconds=hb, progress_seconds=pr)
                self._watch(lease)
                return lease
            tried.add(part)
            if isinstance(answer, ev.NoWorkAvailable) and draining:
                return None
            if time.monotonic() >= deadline:
                return None

    def _watch(self, lease: Lease) -> None:
        from confluent_kafka import TopicPartition

        key = lease.job_id.encode()
        part = partition_for(lease.job_id, self.settings.partitions)
        with self._lock:
            self._jobs[key] = (lease.epoch, {"cancel": False, "drain": False})

        def assign(c: Any) -> None:
            low, high = c.get_watermark_offsets(TopicPartition(self.events, part), timeout=10)
            start = TopicPartition(self.events, part, max(low, high - _EVENTS_LOOKBACK))
            if part in self._events_assigned:
                try:
                    c.seek(start)  # read again from a little before the grant, for instructions since
                except Exception:
                    log.warning("could not rewind %s[%d]; reading on from where it is", self.events, part)
            else:
                c.incremental_assign([start])
                self._events_assigned.add(part)

        self._on_consumer(assign)

    def forget(self, lease: Lease) -> None:
        """The run of this lease is over: stop decoding its job's events."""
        with self._lock:
            self._jobs.pop(lease.job_id.encode(), None)

    # -- fenced commands ---------------------------------------------------------------------------------

    def _fenced(self, lease: Lease, prefix: str, make: Callable[[str], Any]) -> Verdict:
        self._start()
        if lease.job_id.encode() not in self._jobs:
            self._watch(lease)
        command = make(self._next_id(prefix))
        waiter = _Waiter()
        with self._lock:
            self._verdicts[command.command_id] = waiter
        sent_at = time.monotonic()
        try:
            self._send(command)
            waiter.done.wait(self.verdict_seconds)
        finally:
            with self._lock:
                self._verdicts.pop(command.command_id, None)
        with self._lock:
            flags = dict(self._jobs.get(lease.job_id.encode(), (0, {}))[1])
        verdict = waiter.value
        # The same pacing rule the gateway applies to HTTP workers, from this worker's own verdict wait.
        pace = renew_in_s(None if verdict is None else time.monotonic() - sent_at, lease.lease_ttl_ms)
        if verdict is None:
            return Verdict(accepted=False, pending=True, renew_in_s=pace, **flags)
        if isinstance(verdict, ev.CommandRejected):
            return judge(verdict.reason, verdict.detail, verdict.current_epoch)
        return Verdict(accepted=True, event=type(verdict).__name__,
                       lease_expires_at_ms=getattr(verdict, "lease_expires_at_ms", None), renew_in_s=pace, **flags)

    def _fence(self, lease: Lease) -> tuple[str, int, str]:
        return lease.job_id, lease.epoch, self.profile.worker_id

    def heartbeat(self, lease: Lease) -> Verdict:
        return self._fenced(lease, "renew", lambda c: cmd.RenewLease(c, *self._fence(lease)))

    def progress(self, lease: Lease, step: int, progress_pct: float, phase: str) -> Verdict:
        return self._fenced(lease, "prog", lambda c: cmd.ReportProgress(c, *self._fence(lease), step, progress_pct, phase))

    def checkpoint(self, lease: Lease, key: str, step: int, progress_pct: float, checksum: str,
                   size_bytes: int, duration_ms: int | None = None) -> Verdict:
        return self._fenced(lease, "ckpt", lambda c: cmd.RecordCheckpoint(c, *self._fence(lease), key, step,
                                                                          progress_pct, checksum, size_bytes,
                                                                          duration_ms))

    def complete(self, lease: Lease, artifact_key: str, checksum: str, size_bytes: int) -> Verdict:
        return self._fenced(lease, "done", lambda c: cmd.CompleteJob(c, *self._fence(lease), artifact_key, checksum,
                                                             size_bytes))

    def fail(self, lease: Lease, error_code: str, message: str, retryable: bool = True,
             invalid_checkpoint_key: str | None = None) -> Verdict:
        return self._fenced(lease, "fail", lambda c: cmd.FailJob(c, *self._fence(lease), error_code, message[:2000],
                                                         retryable, invalid_checkpoint_key))

    def release(self, lease: Lease, reason: str = "preempted") -> Verdict:
        return self._fenced(lease, "rel", lambda c: cmd.ReleaseLease(c, *self._fence(lease), reason))
