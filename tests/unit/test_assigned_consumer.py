"""When `AssignedConsumer` replaces its consumer and where the new one starts (a stand-in for the confluent
consumer; tests/integration/test_assigned_consumer.py runs it against the real broker)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_INVALID, TopicPartition

from spotreel.adapters.assigned import AssignedConsumer

pytestmark = pytest.mark.unit


@dataclass
class Msg:
    t: str
    p: int
    o: int

    def error(self):
        return None

    def topic(self):
        return self.t

    def partition(self):
        return self.p

    def offset(self):
        return self.o


@dataclass
class Broker:
    high: dict[tuple[str, int], int] = field(default_factory=dict)
    away: bool = False


class FakeConsumer:
    def __init__(self, broker: Broker, made: list) -> None:
        self.broker, self.queue, self.assigned, self.positions, self.closed = broker, [], [], {}, False
        made.append(self)

    def assign(self, tps):
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in tps]

    def consume(self, n, timeout):
        out, self.queue = self.queue[:n], self.queue[n:]
        for m in out:
            self.positions[(m.t, m.p)] = m.o + 1
        return out

    def position(self, tps):
        return [TopicPartition(tp.topic, tp.partition, self.positions.get((tp.topic, tp.partition), OFFSET_INVALID))
                for tp in tps]

    def get_watermark_offsets(self, tp, timeout=None, cached=False):
        if self.broker.away:
            raise RuntimeError("broker away")
        return 0, self.broker.high.get((tp.topic, tp.partition), 0)

    def close(self):
        self.closed = True


def _consumer(broker: Broker, made: list, clock: list) -> AssignedConsumer:
    return AssignedConsumer({"group.id": "g"}, [TopicPartition("t", p, OFFSET_BEGINNING) for p in (0, 1)],
                            stall_s=3.0, clock=lambda: clock[0], factory=lambda conf: FakeConsumer(broker, made))


def test_a_silent_consumer_behind_the_watermark_is_replaced_at_the_next_unread_offsets() -> None:
    broker, made, clock = Broker({("t", 0): 5, ("t", 1): 0}), [], [0.0]
    c = _consumer(broker, made, clock)
    made[0].queue = [Msg("t", 0, i) for i in range(3)]
    assert len(c.consume(10, 0.1)) == 3
    clock[0] = 2.9
    c.consume(10, 0.1)
    assert c.replaced == 0  # not silent long enough
    clock[0] = 3.1
    c.consume(10, 0.1)
    assert c.replaced == 1 and made[0].closed
    # partition 0 from the record after the last one handed out; partition 1 from where it was assigned
    assert made[1].assigned == [("t", 0, 3), ("t", 1, OFFSET_BEGINNING)]


def test_a_consumer_at_the_watermark_or_with_the_broker_away_is_kept() -> None:
    broker, made, clock = Broker({("t", 0): 4}), [], [0.0]
    c = _consumer(broker, made, clock)
    made[0].queue = [Msg("t", 0, i) for i in range(3)]
    c.consume(10, 0.1)
    made[0].positions[("t", 0)] = 4  # past a transaction's commit marker: the position moved on
    for t in (3.5, 7.0):
        clock[0] = t
        c.consume(10, 0.1)
    assert c.replaced == 0
    broker.high[("t", 0)] = 9
    broker.away = True  # cannot tell: not a stall
    clock[0] = 10.5
    c.consume(10, 0.1)
    assert c.replaced == 0
    broker.away = False
    clock[0] = 14.0
    c.consume(10, 0.1)
    assert c.replaced == 1 and made[1].assigned[0] == ("t", 0, 3)


def test_a_seek_moves_where_a_replacement_starts() -> None:
    broker, made, clock = Broker({("t", 0): 50}), [], [0.0]
    c = _consumer(broker, made, clock)
    made[0].seek = lambda tp: None
    c.seek(TopicPartition("t", 0, 40))
    clock[0] = 3.5
    c.consume(10, 0.1)
    assert c.replaced == 1 and made[1].assigned[0] == ("t", 0, 40)
