"""A confluent-kafka producer given the pinned partition lands where Faust (aiokafka's murmur2) expects,
and librdkafka's own murmur2_random partitioner agrees with the helper."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from spotreel.adapters.partitioning import partition_for


def test_librdkafka_murmur2_random_agrees(stack, make_topic, unique):
    topic = make_topic("part", partitions=6)
    prod = Producer({"bootstrap.servers": stack.kafka_bootstrap, "partitioner": "murmur2_random"})
    keys = [f"j{unique}{i}" for i in range(60)]
    for k in keys:
        prod.produce(topic, key=k.encode(), value=b"x")
    prod.flush(10)
    cons = Consumer({"bootstrap.servers": stack.kafka_bootstrap, "group.id": unique, "auto.offset.reset": "earliest"})
    cons.assign([TopicPartition(topic, p, 0) for p in range(6)])
    seen = {}
    while len(seen) < len(keys):
        for m in cons.consume(100, 5):
            assert not m.error()
            seen[m.key().decode()] = m.partition()
    cons.close()
    assert all(seen[k] == partition_for(k, 6) for k in keys)
