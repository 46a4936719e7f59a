"""Small confluent-kafka helpers shared by the services and tests: producing a command to its owner's
partition, reading a partition range, and the extra topics the scheduler needs beyond infra/topics.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.infra.topics import COMPACTED, TopicSpec
from spotreel.settings import Settings

# Event header naming the commands-topic offset that produced the event (see services/scheduler/README.md).
CMD_OFFSET_HEADER = "cmd-offset"


def assignments_topic(settings: Settings) -> str:
    return f"{settings.topic_prefix}.assignments"


def extra_topic_specs(settings: Settings) -> list[TopicSpec]:
    # Answers to RequestWork; short-lived, a requester that is gone does not need them.
    return [TopicSpec(assignments_topic(settings), settings.partitions,
                      {"cleanup.policy": "delete", "retention.ms": str(3600 * 1000)})]


def ensure_scheduler_topics(settings: Settings, timeout: float = 30.0) -> None:
    """Declare every topic the scheduler reads or writes (idempotent)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    from spotreel.infra.kafka import admin_client
    from spotreel.infra.topics import ensure_topics

    ensure_topics(settings, say=lambda *a, **k: None, timeout=timeout)
    admin = admin_client(settings.kafka_bootstrap, timeout)
    existing = admin.list_topics(timeout=timeout).topics
    missing = [s for s in extra_topic_specs(settings) if s.name not in existing]
    if missing:
        futures = admin.create_topics(
            [NewTopic(s.name, num_partitions=s.partitions, replication_factor=1, config=s.config) for s in missing])
        for fut in futures.values():
            try:
                fut.result(timeout)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise


def delete_topics(settings: Settings, timeout: float = 30.0) -> None:
    from spotreel.infra.kafka import admin_client
    from spotreel.infra.topics import topic_specs

    admin = admin_client(settings.kafka_bootstrap, timeout)
    names = [s.name for s in (*topic_specs(settings), *extra_topic_specs(settings))]
    for fut in admin.delete_topics(names).values():
        try:
            fut.result(timeout)
        except Exception:
            pass


_ = COMPACTED  # re-exported for callers that declare compacted topics of their own


def producer(settings: Settings, **extra: Any):
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": settings.kafka_bootstrap, "enable.idempotence": True, "linger.ms": 1}
    conf.update(extra)
    return Producer(conf)


def produce_command(prod: Any, settings: Settings, codec: Codec, command: Any, partition: int | None = None,
                    topic: str | None = None) -> int:
    """Produce `command` keyed by its job_id (or worker_id / schedule_id) to the owner's partition."""
    from spotreel.infra.topics import commands_topic

    key = getattr(command, "job_id", None) or getattr(command, "schedule_id", None) or command.worker_id
    if partition is None:
        partition = partition_for(key, settings.partitions)
    prod.produce(topic or commands_topic(settings), value=codec.encode_message(command), key=key.encode(),
                 partition=partition)
    return partition


def read_partition(bootstrap: str, topic: str, partition: int, start: int = 0, end: int | None = None,
                   timeout: float = 10.0) -> Iterator[Any]:
    """Yield the messages of one partition from `start` up to `end` (default: the high watermark now)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "spotreel-reader", "enable.auto.commit": False,
                  "enable.partition.eof": True, "isolation.level": "read_committed"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
        stop = high if end is None else min(end, high)
        first = max(start, low)
        if first >= stop:
            return
        c.assign([TopicPartition(topic, partition, first if first > 0 else OFFSET_BEGINNING)])
        while True:
            msg = c.poll(timeout)
            if msg is None:
                raise TimeoutError(f"{topic}[{partition}]: nothing read for {timeout}s before offset {stop}")
            if msg.error():
                if msg.error().code() == msg.error()._PARTITION_EOF:
                    if c.position([TopicPartition(topic, partition)])[0].offset >= stop:
                        return
                    continue
                raise RuntimeError(str(msg.error()))
            if msg.offset() >= stop:
                return
            yield msg
            if msg.offset() + 1 >= stop:
                return
    finally:
        c.close()
