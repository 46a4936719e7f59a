"""`AssignedConsumer` (spotreel.adapters.assigned) against the real broker: a consumer that stays silent while
its partitions grow is replaced at the next unread offsets, and a healthy one is left alone, also on a topic
written with transactions (whose commit markers sit past the last record).

The stall librdkafka shows after a broker restart (issues 5153, 4492) cannot be brought about on demand;
pausing the consumer's partitions gives the same picture from outside: assigned, connected, and nothing
delivered while the high watermarks move on."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Producer, TopicPartition

from spotreel.adapters.assigned import AssignedConsumer


def _config(stack) -> dict:
    return {"bootstrap.servers": stack.kafka_bootstrap, "group.id": f"test.assigned.{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False, "isolation.level": "read_committed"}


def _produce(stack, topic: str, partitions: int, first: int, n: int) -> None:
    p = Producer({"bootstrap.servers": stack.kafka_bootstrap, "enable.idempotence": True})
    for i in range(first, first + n):
        p.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert p.flush(30) == 0


def _read(consumer: AssignedConsumer, want: int, seconds: float) -> list[int]:
    got: list[int] = []
    deadline = time.monotonic() + seconds
    while len(got) < want and time.monotonic() < deadline:
        got += [int(m.value()) for m in consumer.consume(100, 0.2) if m.error() is None]
    return got


def test_a_silent_consumer_with_records_past_its_position_is_replaced_and_reads_each_once(stack, make_topic):
    topic = make_topic("stall", partitions=2)
    _produce(stack, topic, 2, 0, 10)
    consumer = AssignedConsumer(_config(stack), [TopicPartition(topic, p, OFFSET_BEGINNING) for p in (0, 1)],
                                stall_s=1.0)
    try:
        assert sorted(_read(consumer, 10, 30)) == list(range(10))
        consumer._consumer.pause([TopicPartition(topic, p) for p in (0, 1)])  # noqa: SLF001 - the stall
        _produce(stack, topic, 2, 10, 10)
        later = _read(consumer, 10, 30)
        assert sorted(later) == list(range(10, 20)), "every new record once, none of the first ten again"
        assert consumer.replaced == 1
        _produce(stack, topic, 2, 20, 4)  # the new consumer goes on reading
        assert sorted(_read(consumer, 4, 30)) == [20, 21, 22, 23]
    finally:
        consumer.close()


def test_a_healthy_idle_consumer_is_left_alone_also_past_transaction_markers(stack, make_topic):
    topic = make_topic("idle", partitions=1)
    tx = Producer({"bootstrap.servers": stack.kafka_bootstrap, "transactional.id": f"test-{uuid.uuid4().hex}"})
    tx.init_transactions(30)
    for batch in range(2):
        tx.begin_transaction()
        for i in range(3):
            tx.produce(topic, value=str(batch * 3 + i).encode(), partition=0)
        tx.commit_transaction(30)
    consumer = AssignedConsumer(_config(stack), [TopicPartition(topic, 0, OFFSET_BEGINNING)], stall_s=0.5)
    try:
        assert _read(consumer, 6, 30) == list(range(6))
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert high > 6, "the commit markers take offsets past the last record"
        _read(consumer, 1, 3)  # three seconds of silence: six stall checks
        assert consumer.replaced == 0 and not consumer.stalled()
    finally:
        consumer.close()
