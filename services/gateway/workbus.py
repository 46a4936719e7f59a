"""The gateway's side of dispatch and of fenced worker commands: one shared Kafka consumer per gateway.

It reads three topics from a single thread:
- `<prefix>.assignments` from its end: WorkAssigned / NoWorkAvailable, routed by request id to the
  gateway's lease desk (leasedesk.py) as long as it watches that request (every answer, not only the first);
- `<prefix>.pool-stats` from the start (compacted): which partitions hold queued work per pool, so a
  RequestWork goes where work is (README of the scheduler, "Dispatch");
- `<prefix>.events` from its end: the scheduler's verdict on a worker command (the accepted event names
  it as `causation_id`, a CommandRejected as `command_id`). Only records whose key (the job id) some
  request waits on are decoded, so following the whole events topic costs a dict lookup per record.

Nothing is committed: a gateway that restarts has no request waiting on anything older.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections import defaultdict
from typing import Any, Callable

from confluent_kafka import KafkaException

from spotreel.adapters.kafka import assignments_topic
from spotreel.codec import Codec
from spotreel.domain import events as ev
from spotreel.infra.topics import events_topic, pool_stats_topic
from spotreel.services.gateway.deps import SinkUnavailable
from spotreel.settings import Settings

log = logging.getLogger("spotreel.gateway.workbus")


class KafkaWorkBus:
    def __init__(self, settings: Settings, codec: Codec | None = None) -> None:
        self.settings = settings
        self.codec = codec or Codec.default()
        self.assignments = assignments_topic(settings)
        self.events = events_topic(settings)
        self.pool_stats_topic = pool_stats_topic(settings)
        self._lock = threading.Lock()
        self._answers: dict[str, tuple[asyncio.AbstractEventLoop, Callable[[Any], None]]] = {}
        self._verdicts: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future]] = {}
        self._jobs: dict[bytes, int] = defaultdict(int)  # job id -> requests waiting on its events
        # pool -> partition -> queued (the latest PoolStats of that partition)
        self._queued: dict[str, dict[int, int]] = defaultdict(dict)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._consumer = None
        self._thread: threading.Thread | None = None
        self._start_lock: asyncio.Lock | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------

    async def ensure_started(self) -> None:
        """Started on the first worker request, so a gateway that serves only /v1 never opens the consumer."""
        if self._thread is not None:
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._thread is None:
                try:
                    await asyncio.to_thread(self.start)
                except KafkaException as exc:
                    # Broker down or topics missing: the worker retries later (503), not a crash (500).
                    raise SinkUnavailable(f"the worker bus could not start: {exc.args[0].str()}") from exc

    def start(self, timeout: float = 15.0) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.settings.kafka_bootstrap,
                      "group.id": f"{self.settings.topic_prefix}.gateway.{uuid.uuid4().hex[:8]}",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 10, "fetch.error.backoff.ms": 50})
        parts = range(self.settings.partitions)
        # Explicit end offsets (not OFFSET_END, which resolves lazily): an answer produced after start()
        # returned is never skipped.
        try:
            tps = [TopicPartition(t, p, c.get_watermark_offsets(TopicPartition(t, p), timeout=timeout)[1])
                   for t in (self.assignments, self.events) for p in parts]
        except BaseException:
            c.close()
            raise
        tps += [TopicPartition(self.pool_stats_topic, p, OFFSET_BEGINNING) for p in parts]
        c.assign(tps)
        self._consumer = c
        self._thread = threading.Thread(target=self._run, name="gateway-workbus", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._consumer is not None:
            self._consumer.close()

    # -- the consumer thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                msgs = self._consumer.consume(500, 0.1)
            except Exception:  # a broker blip: keep going, waiting requests time out on their own
                log.exception("workbus consume failed")
                continue
            for msg in msgs:
                if msg.error():
                    continue
                try:
                    self._route(msg)
                except Exception:
                    log.exception("workbus could not route a record of %s", msg.topic())

    def _route(self, msg: Any) -> None:
        topic = msg.topic()
        if topic == self.events:
            with self._lock:
                wanted = self._jobs.get(msg.key() or b"", 0) > 0
            if not wanted:
                return
            event = self.codec.decode_message(msg.value())
            ids = {getattr(event, "causation_id", None)}
            if isinstance(event, ev.CommandRejected):
                ids.add(event.command_id)
            for cid in ids:
                self._settle(self._verdicts, cid, event)
        elif topic == self.assignments:
            answer = self.codec.decode_message(msg.value())
            with self._lock:
                watcher = self._answers.get(answer.request_id)
            if watcher is not None:
                loop, callback = watcher
                loop.call_soon_threadsafe(callback, answer)
        elif msg.value() is not None:
            stats = self.codec.decode_message(msg.value())
            with self._lock:
                self._queued[stats.pool][stats.partition] = stats.queued

    def _settle(self, table: dict, key: str | None, value: Any) -> None:
        with self._lock:
            waiter = table.pop(key, None) if key is not None else None
        if waiter is not None:
            loop, fut = waiter
            loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(value))

    # -- what the handlers call --------------------------------------------------------------------------

    def partitions_with_work(self, models: tuple[str, ...]) -> list[int]:
        """Partitions whose latest pool stats show queued work for any pool of these models, most first."""
        with self._lock:
            totals: dict[int, int] = defaultdict(int)
            for pool, parts in self._queued.items():
                if pool.rsplit("@", 1)[0] in models:
                    for p, n in parts.items():
                        if n > 0:
                            totals[p] += n
        return sorted(totals, key=lambda p: (-totals[p], p))

    def watch_answer(self, request_id: str, callback: Callable[[Any], None]) -> None:
        """Call `callback(answer)` on the caller's loop for every answer to this request until forgotten."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self._answers[request_id] = (loop, callback)

    def forget_answer(self, request_id: str) -> None:
        with self._lock:
            self._answers.pop(request_id, None)

    def expect_verdict(self, command_id: str, job_id: str) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self._lock:
            self._verdicts[command_id] = (loop, fut)
            self._jobs[job_id.encode()] += 1
        return fut

    def forget_verdict(self, command_id: str, job_id: str) -> None:
        key = job_id.encode()
        with self._lock:
            self._verdicts.pop(command_id, None)
            self._jobs[key] -= 1
            if self._jobs[key] <= 0:
                del self._jobs[key]
