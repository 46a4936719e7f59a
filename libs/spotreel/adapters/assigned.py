"""A confluent-kafka consumer of assigned partitions that mends itself when it goes silent.

The services' readers of compacted views and answers (the scheduler's worker-lease index, fair-share and
pool-stats views; the gateway's pool and usage views; the dispatch listener; capacity stats) `assign`
partitions instead of joining a group. librdkafka reconnects such a consumer after a broker restart, but it
can stay silent afterwards while its partitions keep growing (librdkafka issues 5153 and 4492; a CI run's
chaos test waited 300 s for events already on the topic). `AssignedConsumer` wraps one: when `consume`
returned nothing for `stall_s` while a partition's high watermark is past the consumer's position, it
closes it and assigns a new one at the next unread offsets (nothing read twice, nothing skipped). The
position, not the last record read, is the yardstick: on a topic written with transactions the commit
markers sit past the last record and a healthy consumer's position moves past them.

Only the calls the services make are offered: `consume`, `assign`, `incremental_assign`, `seek`,
`get_watermark_offsets`, `close`.

Limit: the silence is the whole consumer's. A stall of some of its partitions while others still deliver
(several brokers, one of them restarted; or the dispatch listener, which also reads the pool stats that
arrive every second) is not seen here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger("spotreel.kafka.assigned")

# Silence after which the consumer's positions are compared with the high watermarks.
STALL_S = 3.0
OFFSET_END = -1  # confluent_kafka.OFFSET_END, without importing the client at module load


class AssignedConsumer:
    """`config`: the confluent Consumer's settings (with its `group.id`, never joined); `assignment`:
    TopicPartitions with their start offsets (OFFSET_BEGINNING, OFFSET_END or a number)."""

    def __init__(self, config: dict[str, Any], assignment: Iterable[Any] = (), stall_s: float = STALL_S,
                 clock: Callable[[], float] = time.monotonic,
                 factory: Callable[[dict[str, Any]], Any] | None = None) -> None:
        from confluent_kafka import Consumer

        self._config = dict(config)
        self._factory = factory or Consumer
        self._stall_s = stall_s
        self._clock = clock
        self._start: dict[tuple[str, int], int] = {}  # where each partition was assigned or sought
        self._next: dict[tuple[str, int], int] = {}  # the offset after the last record handed out
        self._consumer = self._factory(self._config)
        self._heard = clock()
        self.replaced = 0  # consumers replaced after a silent stall
        tps = list(assignment)
        if tps:
            self.assign(tps)

    # -- what the readers call ---------------------------------------------------------------------------

    def assign(self, tps: list[Any]) -> None:
        self._start = {(tp.topic, tp.partition): tp.offset for tp in tps}
        self._next.clear()
        self._consumer.assign(tps)

    def incremental_assign(self, tps: list[Any]) -> None:
        for tp in tps:
            self._start[(tp.topic, tp.partition)] = tp.offset
            self._next.pop((tp.topic, tp.partition), None)
        self._consumer.incremental_assign(tps)

    def seek(self, tp: Any) -> None:
        self._start[(tp.topic, tp.partition)] = tp.offset
        self._next.pop((tp.topic, tp.partition), None)
        self._consumer.seek(tp)

    def get_watermark_offsets(self, tp: Any, timeout: float | None = None, cached: bool = False) -> tuple[int, int]:
        return self._consumer.get_watermark_offsets(tp, timeout=timeout, cached=cached)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        msgs = self._consumer.consume(num_messages, timeout)
        for msg in msgs:
            if msg.error() is None:
                self._next[(msg.topic(), msg.partition())] = msg.offset() + 1
        now = self._clock()
        if msgs:
            self._heard = now
        elif now - self._heard >= self._stall_s:
            self._heard = now
            if self.stalled():
                self._replace()
        return msgs

    def close(self) -> None:
        self._consumer.close()

    # -- the mend ----------------------------------------------------------------------------------------

    def stalled(self) -> bool:
        """Whether a partition holds records past this consumer's position (the broker asked now; False
        when it cannot be asked: a broker away is not a stall)."""
        from confluent_kafka import TopicPartition

        keys = list(self._start)
        if not keys:
            return False
        try:
            positions = self._consumer.position([TopicPartition(t, p) for t, p in keys])
            for key, pos in zip(keys, positions):
                low, high = self._consumer.get_watermark_offsets(TopicPartition(*key), timeout=2.0, cached=False)
                at = pos.offset if pos.offset >= 0 else self._next.get(key, self._start[key])
                if at < 0:  # never fetched from OFFSET_BEGINNING (or END: then nothing is owed)
                    at = low if at != OFFSET_END else high
                if high > max(at, low):
                    return True
        except Exception:  # noqa: BLE001 - the broker is away or the metadata is not there yet
            return False
        return False

    def _replace(self) -> None:
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(t, p, self._next.get((t, p), start)) for (t, p), start in self._start.items()]
        log.warning("a consumer of %s was silent %.0f s with records past its position: replaced at the next "
                    "unread offsets", sorted({t for t, _ in self._start}), self._stall_s)
        try:
            self._consumer.close()
        except Exception:  # noqa: BLE001 - the old one may be broken; the new one is what matters
            log.exception("closing the stalled consumer failed")
        self._consumer = self._factory(self._config)
        self._consumer.assign(tps)
        self.replaced += 1

