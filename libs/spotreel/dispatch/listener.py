"""One consumer thread that brings the scheduler's answers back to whoever waits for them.

It reads, with partitions assigned explicitly (no consumer group is joined, nothing is committed, so
thousands of spot workers coming and going cause no rebalance):
- `<prefix>.assignments` from its end (all partitions, or the one a worker's answers land on): WorkAssigned /
  NoWorkAvailable, handed to the handler registered for its request id, every answer until it is dropped;
- `<prefix>.pool-stats` from the start (compacted): where queued work is (`order.PoolQueues`);
- `<prefix>.events` and `<prefix>.replies`, either every partition from its end (a gateway, a simulator) or,
  for a worker, only the partitions of the jobs it holds (`follow`): the verdict on a command is the event
  naming it as `causation_id`, or a CommandRejected naming it as `command_id`, or, for a renewal the
  scheduler answered without persisting it (domain/renewals.py), the LeaseRenewed / ProgressReported reply
  naming it on the replies topic (its version is that of the job state it was judged against), alone or in a
  gateway's RenewalReplies record (keyed `~batch:<gateway>`, each reply in it routed as if it had come
  alone; the NoWorkAvailable answers it carries for the batch's lease requests go to their request ids as
  if read from the assignments topic). Only records whose key (the job id) someone waits on are decoded, and
  the batches, so following the whole topic costs a dict lookup per record.

Handlers run on the consumer thread and must not block; asyncio callers hand over with
`call_soon_threadsafe` (aio.py), threads with an Event.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from typing import Any, Callable, Iterable

from spotreel.runtime import tracing
from spotreel.platform.consumers import consumer, private_group
from spotreel.adapters.kafka import BATCH_REPLY_KEY_PREFIX
from spotreel.codec import Codec
from spotreel.dispatch.order import PoolQueues
from spotreel.domain import events as ev
from spotreel.platform.topics import assignments_topic, events_topic, pool_stats_topic, replies_topic
from spotreel.config.settings import Settings

log = logging.getLogger("spotreel.dispatch")

Handler = Callable[[Any], None]


class DispatchUnavailable(Exception):
    """Kafka could not be reached (or the topics are missing): the caller retries later."""


class DispatchListener:
    def __init__(self, settings: Settings, codec: Codec | None = None, *, name: str,
                 answer_partitions: Iterable[int] | None = None, all_events: bool = True) -> None:
        """`answer_partitions`: the assignments partitions to read (None: all). `all_events`: read every
        events partition from its end; otherwise only those passed to `follow`."""
        self.settings = settings
        self.codec = codec or Codec.default()
        self.name = name
        self.assignments = assignments_topic(settings)
        self.events = events_topic(settings)
        self.replies = replies_topic(settings)
        self.pool_stats = pool_stats_topic(settings)
        self.queues = PoolQueues()
        n = settings.partitions
        self._answer_parts = list(range(n)) if answer_partitions is None else list(answer_partitions)
        self._all_events = all_events
        self._lock = threading.Lock()
        self._answers: dict[str, Handler] = {}
        self._granted: dict[str, tuple[str, int]] = {}  # request id -> (job, epoch) handed on
        self._verdicts: dict[str, Handler] = {}
        self._interest: dict[bytes, int] = defaultdict(int)  # job id -> verdicts waited on
        self._observers: dict[bytes, Handler] = {}  # job id -> sees every event of that job
        # (job id, epoch) -> the traceparent its grant carried (spotreel/runtime/tracing.py): traced grants only.
        self._lease_traces: dict[tuple[str, int], str] = {}
        self._followed: set[int] = set()  # events partitions assigned on demand (consumer thread only)
        self._ops: list[tuple[Callable[[Any], None], threading.Event]] = []
        self._stop = threading.Event()
        self._consumer: Any = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self, timeout: float = 15.0) -> None:
        if self._thread is not None:
            return
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        # Verdicts and answers wait at most 10 ms more for a fetch; the broker gets at most about 100 fetches a
        # second from this reader instead of one per record or two.
        c = consumer(self.settings.kafka_bootstrap, private_group(self.settings, self.name), fetch_wait_ms=10,
                     extra={"fetch.error.backoff.ms": 50})
        ends = [(self.assignments, p) for p in self._answer_parts]
        if self._all_events:
            ends += [(t, p) for t in (self.events, self.replies) for p in range(self.settings.partitions)]
        try:
            # Explicit end offsets (not OFFSET_END, which resolves lazily): an answer produced after start()
            # returned is never skipped.
            tps = [TopicPartition(t, p, c.get_watermark_offsets(TopicPartition(t, p), timeout=timeout)[1])
                   for t, p in ends]
        except KafkaException as exc:
            c.close()
            raise DispatchUnavailable(f"kafka {self.settings.kafka_bootstrap}: {exc.args[0].str()}") from None
        except BaseException:
            c.close()
            raise
        tps += [TopicPartition(self.pool_stats, p, OFFSET_BEGINNING) for p in range(self.settings.partitions)]
        c.assign(tps)
        self._consumer = c
        self._thread = threading.Thread(target=self._run, name=f"dispatch-{self.name}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # -- registrations (any thread) ----------------------------------------------------------------------

    def on_answer(self, request_id: str, handler: Handler) -> None:
        """`handler(answer)` for every answer to this request until `drop_answer`, but a grant only once: an
        owner that reads its uncommitted tail again after a rebalance answers a RequestWork it had granted
        with the same grant again (scheduler `reanswer`), and a worker already rendering under the first
        copy would take the second for one nobody claimed and hand its own lease back (`unclaimed`). A
        different grant to the same request is still handed on."""
        with self._lock:
            self._answers[request_id] = handler

    def drop_answer(self, request_id: str) -> None:
        with self._lock:
            self._answers.pop(request_id, None)
            self._granted.pop(request_id, None)

    def on_verdict(self, command_id: str, job_id: str, handler: Handler) -> None:
        """`handler(event)` once, for the verdict on this command (an event it caused or its rejection)."""
        with self._lock:
            self._verdicts[command_id] = handler
            self._interest[job_id.encode()] += 1

    def drop_verdict(self, command_id: str, job_id: str) -> None:
        key = job_id.encode()
        with self._lock:
            self._verdicts.pop(command_id, None)
            self._interest[key] -= 1
            if self._interest[key] <= 0:
                del self._interest[key]

    def observe(self, job_id: str, handler: Handler | None) -> None:
        """`handler(event)` for every event of this job read from now on (None: stop)."""
        with self._lock:
            if handler is None:
                self._observers.pop(job_id.encode(), None)
            else:
                self._observers[job_id.encode()] = handler

    def follow(self, partition: int, lookback: int, timeout: float = 15.0) -> None:
        """Read this events partition (from `lookback` records before its end, again if already read), for a
        listener that does not read them all. Blocks until the consumer thread did it."""
        from confluent_kafka import TopicPartition

        def assign(c: Any) -> None:
            starts = []
            for topic in (self.events, self.replies):
                low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                starts.append(TopicPartition(topic, partition, max(low, high - lookback)))
            if partition in self._followed:
                for start in starts:
                    c.seek(start)  # read again from a little before now, for instructions since
            else:
                c.incremental_assign(starts)
                self._followed.add(partition)

        self.on_consumer(assign, timeout)

    def on_consumer(self, op: Callable[[Any], None], timeout: float = 15.0) -> None:
        """Run `op(consumer)` on the consumer thread (the only one that touches the consumer)."""
        done = threading.Event()
        with self._lock:
            self._ops.append((op, done))
        if not done.wait(timeout):
            raise DispatchUnavailable("the dispatch consumer thread did not answer")

    # -- the consumer thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                ops, self._ops = self._ops, []
            for op, done in ops:
                try:
                    op(self._consumer)
                except Exception:
                    log.exception("dispatch consumer operation failed")
                done.set()
            try:
                msgs = self._consumer.consume(500, 0.05)
            except Exception:  # a broker blip: keep going, waiting requests time out on their own
                log.exception("dispatch consume failed")
                continue
            for msg in msgs:
                if msg.error():
                    continue
                try:
                    self._route(msg)
                except Exception:
                    log.exception("dispatch could not route a record of %s", msg.topic())

    def _route(self, msg: Any) -> None:
        topic = msg.topic()
        if topic == self.events or topic == self.replies:
            key = msg.key() or b""
            if key.startswith(BATCH_REPLY_KEY_PREFIX):
                # A gateway's renewals and lease requests answered in one record: each as if it had come alone.
                replies = self.codec.decode_message(msg.value())
                for reply in (*replies.renewed, *replies.progressed):
                    self._deliver(reply.job_id.encode(), reply, None)
                for refusal in replies.refused:
                    self._answer(refusal)
                return
            self._deliver(key, None, msg.value())
        elif topic == self.assignments:
            answer = self.codec.decode_message(msg.value())
            headers = msg.headers()
            if headers and getattr(answer, "job_id", None):
                self._trace_lease(answer, tracing.traceparent_of(headers))
            self._answer(answer)
        elif msg.value() is not None:
            self.queues.record(self.codec.decode_message(msg.value()))

    def _answer(self, answer: Any) -> None:
        """Hand a WorkAssigned / NoWorkAvailable to the handler registered for its request id."""
        with self._lock:
            handler = self._answers.get(answer.request_id)
            if handler is not None and isinstance(answer, ev.WorkAssigned):
                grant = (answer.job_id, answer.epoch)
                if self._granted.get(answer.request_id) == grant:
                    return  # the same grant again (see `on_answer`)
                self._granted[answer.request_id] = grant
        if handler is not None:
            handler(answer)

    def _deliver(self, key: bytes, event: Any, value: bytes | None) -> None:
        """Hand a job's event (or its record `value`, decoded only if someone waits) to its observer and to the
        verdict it settles."""
        with self._lock:
            observer = self._observers.get(key)
            wanted = observer is not None or self._interest.get(key, 0) > 0
        if not wanted:
            return
        if event is None:
            event = self.codec.decode_message(value)
        if observer is not None:
            observer(event)
        self._settle(getattr(event, "causation_id", None), event)
        if isinstance(event, ev.CommandRejected):
            self._settle(event.command_id, event)

    def _trace_lease(self, answer: Any, traceparent: str | None) -> None:
        if traceparent is None:
            return
        with self._lock:
            self._lease_traces[(answer.job_id, answer.epoch)] = traceparent
            while len(self._lease_traces) > 1000:
                self._lease_traces.pop(next(iter(self._lease_traces)))

    def lease_trace(self, job_id: str, epoch: int) -> str | None:
        """The traceparent the grant of (job, epoch) carried, if it was traced and seen here."""
        with self._lock:
            return self._lease_traces.get((job_id, epoch))

    def _settle(self, command_id: str | None, event: Any) -> None:
        if command_id is None:
            return
        with self._lock:
            handler = self._verdicts.pop(command_id, None)
        if handler is not None:
            handler(event)
