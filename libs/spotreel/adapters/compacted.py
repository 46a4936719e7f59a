"""The one reader of a compacted topic into memory, which the views of the compacted topics share (pool
stats, tenant usage and settings, worker leases): every partition assigned from its beginning, each record
decoded and handed to `apply`, which keeps the newest per key, so the view holds what the topic holds.
`caught_up` is set once it has read up to the end offsets the topics had when it connected. Its consumer
comes from platform/consumers.py."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from spotreel.codec import Codec
from spotreel.platform.consumers import consumer, private_group
from spotreel.config.settings import Settings

log = logging.getLogger(__name__)


class CompactedReader:
    """Every partition of `topics`, from the beginning, decoded into `apply`, on a thread named `name`.

    `fetch_wait_ms` is how much later than at once a record may be seen; `poll_s` how long one consume waits
    (and so how soon `close` is noticed). With `retry_s`, a broker that cannot be reached at `start` is tried
    again every `retry_s` seconds on the thread (the view stays empty until then); without it `start` raises.
    `group_id`: a group of this process alone unless given. `track_end`: ask the broker for the end offsets
    on connecting, for `caught_up` (without it connecting asks the broker nothing, and `caught_up` is set at
    once). `poll` reads on the caller's thread instead of `start`ing one."""

    def __init__(self, settings: Settings, name: str, topics: Sequence[str], apply: Callable[[Any], None], *,
                 codec: Codec | None = None, fetch_wait_ms: int | None = None, poll_s: float = 0.1,
                 batch: int = 500, quiet: bool = False, retry_s: float | None = None,
                 group_id: str | None = None, track_end: bool = True, end_timeout_s: float = 30.0) -> None:
        self.settings = settings
        self.name = name
        self.topics = tuple(topics)
        self.apply = apply
        self.codec = codec or Codec.default()
        self.fetch_wait_ms = fetch_wait_ms
        self.poll_s = poll_s
        self.batch = batch
        self.quiet = quiet
        self.retry_s = retry_s
        self.group_id = group_id or private_group(settings, name)
        self.track_end = track_end
        self.end_timeout_s = end_timeout_s
        self.caught_up = threading.Event()
        self._behind: dict[tuple[str, int], int] = {}
        self._consumer: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- connecting ----------------------------------------------------------------------------------------

    def connect(self) -> None:
        """Make the consumer, note the end offsets and assign every partition from its beginning (idempotent)."""
        if self._consumer is not None:
            return
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        c = consumer(self.settings.kafka_bootstrap, self.group_id, fetch_wait_ms=self.fetch_wait_ms, quiet=self.quiet)
        try:
            tps = [(t, p) for t in self.topics for p in range(self.settings.partitions)]
            ends = ({tp: c.get_watermark_offsets(TopicPartition(*tp), timeout=self.end_timeout_s)[1] for tp in tps}
                    if self.track_end else {})
            c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in tps])
        except BaseException:
            c.close()
            raise
        self._behind = {tp: end for tp, end in ends.items() if end > 0}
        if not self._behind:
            self.caught_up.set()
        self._consumer = c

    def _connect_retrying(self) -> bool:
        from confluent_kafka import KafkaException

        while not self._stop.is_set():
            try:
                self.connect()
                return True
            except KafkaException as exc:  # broker not up yet: the view stays empty until it is
                log.warning("%s: %s; retrying", self.name, exc)
                self._stop.wait(self.retry_s)
        return False

    # -- reading -------------------------------------------------------------------------------------------

    def poll(self, timeout: float | None = None) -> int:
        """Take in what has arrived (connecting first if need be); the number of records handed to `apply`."""
        self.connect()
        n = 0
        for msg in self._consumer.consume(self.batch, self.poll_s if timeout is None else timeout):
            if msg.error():
                continue
            if msg.value() is not None:
                try:
                    self.apply(self.codec.decode_message(msg.value()))
                    n += 1
                except Exception:  # noqa: BLE001 - one bad record must not stop the view
                    log.exception("%s: unreadable record at %s[%d]@%d", self.name, msg.topic(), msg.partition(),
                                  msg.offset())
            tp = (msg.topic(), msg.partition())
            end = self._behind.get(tp)
            if end is not None and msg.offset() + 1 >= end:
                del self._behind[tp]
                if not self._behind:
                    self.caught_up.set()
        return n

    def read_to_end(self, timeout: float) -> None:
        """Read on this thread up to the end offsets the topics had on connecting (TimeoutError after
        `timeout` seconds), for a command that reads once and exits."""
        deadline = time.monotonic() + timeout
        self.connect()
        while not self.caught_up.is_set():
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.name}: {sorted(self._behind)} not read to their end within {timeout:.0f} s")
            self.poll()

    # -- the thread ----------------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether `start` was called (its reader thread exists)."""
        return self._thread is not None

    def start(self) -> None:
        if self._thread is not None:
            return
        if self.retry_s is None:
            self.connect()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self.retry_s is not None and not self._connect_retrying():
            return
        try:
            while not self._stop.is_set():
                self.poll()
        finally:
            self._close_consumer()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        else:
            self._close_consumer()

    def _close_consumer(self) -> None:
        c, self._consumer = self._consumer, None
        if c is not None:
            c.close()
