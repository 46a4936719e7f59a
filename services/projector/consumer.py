"""The projector's Kafka loop: consume a batch, fold and project it, write it to Cassandra, then commit.

At-least-once delivery (offsets committed only after the writes succeeded) plus idempotent writes (see
projection.py) give an exactly-once effect. A record that does not decode goes to the dead-letter topic
with the reason in its headers and is skipped: one bad record must not stop every read model.

Pipelined one batch deep while there is a backlog: a batch's writes are sent and, while Cassandra applies
them, the next batch is consumed, decoded and folded; then the first batch's writes are awaited (retried
until they succeed), only then are its own offsets (not the consumer's position) committed, and the second
batch's writes are sent. So at most one batch is written and not committed, as before; a crash in between
redelivers it. The writes are awaited at once wherever waiting matters: when every assigned partition is
read to its end (no next batch to overlap with: the commit is not held back), before a job's history is
read back (_restore), before partitions are revoked, and before the loop ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from spotreel.runtime import tracing
from spotreel.platform.consumers import GROUP_MEMBER, consumer
from spotreel.codec import Codec, CodecError
from spotreel.codec.mapping import mapping_for
from spotreel.domain import events as ev
from spotreel.domain.evolve import fold
from spotreel.domain.state import JobState
from spotreel.services.projector.job_rows import full_state_ops
from spotreel.services.projector.projection import project_batch
from spotreel.services.projector.rows import Envelope, RowOp
from spotreel.services.projector.store import Store, pools_touched

log = logging.getLogger("spotreel.projector")


# The tuning knobs below are read from SPOTREEL_PROJECTOR_<NAME> (spotreel.config.knobs.dataclass_overrides, listed in
# docs/SETTINGS.md); the wiring fields come from Settings, and batch_size and the modes are the command's options.
ENV_PREFIX = "SPOTREEL_PROJECTOR_"
NOT_FROM_ENV = frozenset({"bootstrap", "group_id", "events_topic", "events_deadletter_topic", "rebuild",
                          "until_idle", "batch_size"})


@dataclass(frozen=True)
class ProjectorConfig:
    bootstrap: str
    group_id: str
    events_topic: str
    events_deadletter_topic: str
    rebuild: bool = False
    until_idle: bool = False
    # --until-idle gives up waiting for a partition assignment after this long.
    idle_timeout_s: float = 60.0
    batch_size: int = 2000
    # How long one poll of the events topic waits for records before the loop looks at its timers.
    poll_timeout_s: float = 0.2
    # Job states kept in memory between batches (least recently used out first); a state not kept is
    # folded again from events_by_job when its next event comes.
    cache_size: int = 100_000
    # How often the pool-stats rows (queued and running per pool) are written.
    pool_stats_every_s: float = 1.0
    # How often the consumer lag (events behind the topic's end) is measured for the metrics.
    lag_every_s: float = 5.0
    # librdkafka's own default; the group drops a member that does not poll for this long (a batch whose
    # writes wait for Cassandra does not poll), and tests shorten it.
    max_poll_interval_ms: int = 300_000
    # A killed projector's partitions move to its replacement after this, not the 45 s default; tests
    # shorten it down to the broker's group.min.session.timeout.ms (6 s by default).
    session_timeout_ms: int = 10_000


@dataclass
class Stats:
    events: int = 0
    rejections: int = 0
    skipped: int = 0
    dead_lettered: int = 0
    writes: int = 0
    batches: int = 0
    replayed_histories: int = 0
    commit_failures: int = 0
    requests: int = 0
    lag: int | None = None
    started: float = field(default_factory=time.monotonic)


class Projector:
    def __init__(self, config: ProjectorConfig, store: Store, codec: Codec,
                 on_lag: Callable[[int], None] | None = None) -> None:
        self.config = config
        self.store = store
        self.codec = codec
        self.on_lag = on_lag
        self.stats = Stats()
        self._states: OrderedDict[str, JobState | None] = OrderedDict()
        self._names: dict[type, str] = {}
        self._assigned: set[tuple[str, int]] = set()
        self._eof: set[tuple[str, int]] = set()
        self._rewound: set[tuple[str, int]] = set()
        self._pending_pools: set[str] = set()
        self._pools_at = 0.0
        self._lag_at = 0.0
        self._pending: _Pending | None = None
        self._rows: dict[str, Any] = {}
        self._stop = threading.Event()
        # Bigger fetches: the projector is throughput-bound, not latency-bound (at most 100 ms more lag).
        self.consumer = consumer(config.bootstrap, config.group_id, read_committed=True, fetch_wait_ms=100,
                                 quiet=True, extra={**GROUP_MEMBER, "enable.partition.eof": True,
                                                    "session.timeout.ms": config.session_timeout_ms,
                                                    "max.poll.interval.ms": config.max_poll_interval_ms,
                                                    "queued.min.messages": 20000})
        self.producer = Producer({"bootstrap.servers": config.bootstrap, "enable.idempotence": True,
                                  "log_level": 3})

    # -- partition bookkeeping ---------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.config.rebuild:
            for p in partitions:
                if (p.topic, p.partition) not in self._rewound:
                    p.offset = OFFSET_BEGINNING
                    self._rewound.add((p.topic, p.partition))
            consumer.assign(partitions)
        self._assigned |= {(p.topic, p.partition) for p in partitions}

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # The batch in flight is committed while its partitions are still ours (or its commit fails and
        # the next owner projects it again, as after any failed commit).
        self._settle(self._stop)
        gone = {(p.topic, p.partition) for p in partitions}
        self._assigned -= gone
        self._eof -= gone

    def idle(self) -> bool:
        return bool(self._assigned) and self._assigned <= self._eof

    # -- the loop -----------------------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None) -> Stats:
        stop = self._stop = stop or threading.Event()
        self.consumer.subscribe([self.config.events_topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        began = time.monotonic()
        try:
            while not stop.is_set():
                msgs = self._consume()
                if msgs:
                    self._batch(msgs, stop)
                if not msgs or self.idle():
                    self._settle(stop)  # nothing more to read for now: no reason to hold the commit back
                self._housekeeping(force=False)
                if self.config.until_idle:
                    if self.idle() and not msgs:
                        break
                    if not self._assigned and time.monotonic() - began > self.config.idle_timeout_s:
                        raise TimeoutError(f"no partition of {self.config.events_topic} assigned")
            self._settle(stop)
            self._housekeeping(force=True)
        finally:
            self.consumer.close()
            self.producer.flush(10)
        return self.stats

    def _consume(self) -> list[Any]:
        """What librdkafka has fetched already (up to batch_size), without waiting; only when that is
        nothing, wait up to poll_timeout_s for a batch. consume(n, timeout) returns early only with n
        records, so a backlog's last short batch (and any batch short of n) would idle the whole timeout."""
        msgs = self.consumer.consume(self.config.batch_size, 0)
        return msgs or self.consumer.consume(self.config.batch_size, self.config.poll_timeout_s)

    def _batch(self, msgs: list[Any], stop: threading.Event) -> None:
        items: list[tuple[Any, Envelope]] = []
        offsets: dict[tuple[str, int], int] = {}
        traced: list[tuple[str, Any, int]] = []  # (traceparent, event, read at ns): spans ended once written
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self._eof.add((m.topic(), m.partition()))
                else:
                    log.warning("kafka: %s", err.str())
                continue
            offsets[(m.topic(), m.partition())] = m.offset() + 1
            self._eof.discard((m.topic(), m.partition()))
            decoded = self._decode(m)
            if decoded is not None:
                items.append(decoded)
                tp = tracing.traceparent_of(m.headers())
                if tp is not None:
                    traced.append((tp, decoded[0], time.time_ns()))
        ops = self._project(items, stop)  # meanwhile the previous batch's writes are under way
        self._settle(stop)
        self._pending = _Pending(ops, offsets, self._submit(ops), traced)

    def _submit(self, ops: list[RowOp]) -> Any:
        try:
            return self.store.submit(ops)
        except Exception as exc:  # refused at once (no connection): awaited and retried like any failure
            return _Refused(exc)

    def _settle(self, stop: threading.Event) -> None:
        """Waits for the writes in flight (retrying them until they succeed), then commits their batch."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            rows = pending.writes.wait()
        except Exception as exc:
            if stop.is_set():
                raise
            log.warning("cassandra write failed (%s: %s); retrying", type(exc).__name__, exc)
            rows = self._retrying(lambda: self.store.write(pending.ops), "write", stop)
        self.stats.writes += rows
        self.stats.requests = getattr(self.store, "requests", 0)
        self._pending_pools |= pools_touched(pending.ops)
        self.producer.flush(30)
        self._commit(pending.offsets)
        self.stats.batches += 1
        for tp, event, read_ns in pending.traced:  # the trace's projector hop: read -> its rows written
            tracing.start_span(f"projector {type(event).__name__}", tp, start_time=read_ns,
                               attributes={"spotreel.job_id": getattr(event, "job_id", "") or ""}).end()

    def _commit(self, offsets: dict[tuple[str, int], int]) -> None:
        """Commit what this batch projected. A failed commit loses nothing: the rows are written, and the
        records come again (to this projector or the partition's new owner) and are projected again to the
        same rows. So it is logged, never fatal: a Kafka restart and then a Cassandra restart (the batch's
        writes waiting, no poll) make the group drop the projector, and the commit answers _ASSIGNMENT_LOST
        (the whole-system chaos test does exactly that)."""
        if not offsets:
            return
        try:
            self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                                 asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                self.stats.commit_failures += 1
                log.warning("offset commit failed (%s); the batch will be redelivered and projected again",
                            exc.args[0].str())

    def _decode(self, m: Any) -> tuple[Any, Envelope] | None:
        value = m.value()
        try:
            event = self.codec.decode_message(value)
        except CodecError as exc:
            self._dead_letter(m, exc.reason, exc.detail)
            return None
        if not isinstance(event, ev.ALL_EVENTS):
            self._dead_letter(m, "not_an_event", type(event).__name__)
            return None
        if isinstance(event, ev.ScheduleCommandRejected):
            self.stats.skipped += 1  # a refused schedule command changes no row
            return None
        cls = type(event)
        name = self._names.get(cls)
        if name is None:
            name = self._names[cls] = mapping_for(cls).full_name
        return event, Envelope(bytes(value), name)

    def _dead_letter(self, m: Any, code: str, detail: str) -> None:
        self.stats.dead_lettered += 1
        log.warning("dead-lettering %s[%d]@%d: %s %s", m.topic(), m.partition(), m.offset(), code, detail)
        headers = [("error", code.encode()), ("detail", detail[:1000].encode()),
                   ("source", f"{m.topic()}/{m.partition()}/{m.offset()}".encode())]
        self.producer.produce(self.config.events_deadletter_topic, key=m.key(), value=m.value() or b"", headers=headers)
        self.producer.poll(0)

    # -- folding ------------------------------------------------------------------------------------------

    def _project(self, items: list[tuple[Any, Envelope]], stop: threading.Event) -> list[RowOp]:
        """The batch's writes, coalesced (projection.project_batch): one write per row at its newest
        version, the history rows one per event."""
        restored = self._restore(items, stop)
        rows = self._rows
        ops, states = project_batch(items, self._states.get, restored, rows)
        for job, state in states.items():
            self._remember(job, state)
        # The row values of the jobs of this batch, for the next one (a job's rows are only used while
        # they are its state's, so this cache cannot go stale; it is kept to one batch's jobs).
        self._rows = {job: rows[job] for job in states if job in rows}
        rejections = sum(1 for event, _ in items if isinstance(event, ev.CommandRejected))
        self.stats.rejections += rejections
        self.stats.events += len(items) - rejections
        return ops

    def _remember(self, job_id: str, state: JobState | None) -> None:
        self._states[job_id] = state
        self._states.move_to_end(job_id)
        while len(self._states) > self.config.cache_size:
            self._states.popitem(last=False)

    def _restore(self, items: list[tuple[Any, Envelope]], stop: threading.Event) -> list[RowOp]:
        """Jobs first seen mid-history (after a restart) get their state folded from events_by_job.

        The full row is rewritten from that state: a crash between the history write and the job-row
        write of an earlier attempt leaves nothing behind this way."""
        wanted: dict[str, int] = {}
        for event, _ in items:
            if not isinstance(event, ev.JOB_EVENTS):  # schedule events: their rows need no state
                continue
            job = event.job_id
            if job in self._states or job in wanted or isinstance(event, ev.CommandRejected):
                continue
            if isinstance(event, ev.JobSubmitted):
                self._states[job] = None
                continue
            wanted[job] = event.version
        if not wanted:
            return []
        self._settle(stop)  # the history read back must hold every row written so far
        ops: list[RowOp] = []
        # Read like the writes below, retried while Cassandra is away: a projector restarted during a
        # Cassandra restart reads histories back before Cassandra answers.
        for job, rows in self._retrying(lambda: self.store.histories(wanted), "read", stop).items():
            history = []
            for _, payload in rows:
                try:
                    history.append(self.codec.decode_message(payload))
                except CodecError as exc:  # it decoded once, when it was written; keep going regardless
                    log.error("events_by_job %s: undecodable payload: %s", job, exc)
            state = fold(history)
            self._remember(job, state)
            self.stats.replayed_histories += 1
            if state is not None:
                ops += full_state_ops(state)
        return ops

    # -- writes -------------------------------------------------------------------------------------------

    @staticmethod
    def _retrying(call: Callable[[], Any], what: str, stop: threading.Event) -> Any:
        """Until Cassandra answers (down or overloaded: reads and idempotent writes can simply be retried)."""
        delay = 0.2
        while True:
            try:
                return call()
            except Exception as exc:
                if stop.is_set():
                    raise
                log.warning("cassandra %s failed (%s: %s); retrying in %.1fs", what, type(exc).__name__, exc, delay)
                stop.wait(delay)
                delay = min(delay * 2, 10.0)

    def _housekeeping(self, force: bool) -> None:
        now = time.monotonic()
        if self._pending_pools and (force or now - self._pools_at >= self.config.pool_stats_every_s):
            try:
                self.store.refresh_pool_stats(self._pending_pools, int(time.time() * 1000))
                self._pending_pools.clear()
            except Exception as exc:  # derived data; the next round recounts
                log.warning("pool_stats refresh failed: %s", exc)
            self._pools_at = now
        if self._assigned and (force or now - self._lag_at >= self.config.lag_every_s):
            self._lag_at = now
            self.stats.lag = self.lag()
            if self.on_lag is not None and self.stats.lag is not None:
                self.on_lag(self.stats.lag)

    def lag(self) -> int | None:
        """Records on the assigned partitions not yet projected (high watermark minus position)."""
        try:
            parts = [TopicPartition(t, p) for t, p in sorted(self._assigned)]
            total = 0
            for tp in self.consumer.position(parts):
                _, high = self.consumer.get_watermark_offsets(tp, cached=True)  # high mark from fetches
                if high < 0:
                    # No fetch has reported a high mark yet (-1001, OFFSET_INVALID): ask the broker.
                    _, high = self.consumer.get_watermark_offsets(tp, timeout=5.0)
                total += partition_lag(tp.offset, high)
            return total
        except KafkaException:
            return None


@dataclass(frozen=True)
class _Pending:
    """A batch whose writes are in flight: what to retry if they fail, and what to commit once they are in."""

    ops: list[RowOp]
    offsets: dict[tuple[str, int], int]
    writes: Any  # store.PendingWrites, or _Refused
    traced: list = field(default_factory=list)  # events that carried a traceparent (runtime/tracing.py)


class _Refused:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def wait(self) -> int:
        raise self.exc


def partition_lag(position: int, high: int) -> int:
    """Unprojected records of one partition, never negative.

    librdkafka reports unknown offsets as negative sentinels (OFFSET_INVALID = -1001 for a position before
    the first fetch or a high mark not yet cached). Added up as numbers they made the lag metric negative;
    an unknown high mark counts as no lag, an unknown position as the whole partition."""
    if high < 0:
        return 0
    if position < 0:
        return high
    return max(0, high - position)
