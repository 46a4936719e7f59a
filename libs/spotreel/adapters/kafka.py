"""Small confluent-kafka helpers shared by the services and tests: producing a command to its owner's
partition and reading a partition range (consumers come from platform/consumers.py; `batched_fetch` is
re-exported from there). Topic names and their declaration live in platform/topics.py; three
of them are re-exported here for the callers that import them from this module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from spotreel.platform.consumers import batched_fetch, consumer
from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.platform.topics import assignments_topic, delete_topics, ensure_scheduler_topics
from spotreel.config.settings import Settings

__all__ = ["BATCH_REPLY_KEY_PREFIX", "CMD_ENTRY_HEADER", "CMD_OFFSET_HEADER", "assignments_topic", "batched_fetch", "delete_topics", "ensure_scheduler_topics",
           "producer", "produce_command", "read_partition"]

# Event header naming the commands-topic offset that produced the event (see services/scheduler/README.md).
CMD_OFFSET_HEADER = "cmd-offset"
# Beside it on the events of a renewal inside a RenewalBatch: the renewal's place in the batch (0-based), so a
# batch whose events landed only in part before a crash is applied again from the next renewal on.
CMD_ENTRY_HEADER = "cmd-entry"
# The key of a RenewalReplies record on the replies topic: this prefix and the gateway's id.
BATCH_REPLY_KEY_PREFIX = b"~batch:"


def producer(settings: Settings, **extra: Any):
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": settings.kafka_bootstrap, "enable.idempotence": True, "linger.ms": 1}
    conf.update(extra)
    return Producer(conf)


def produce_command(prod: Any, settings: Settings, codec: Codec, command: Any, partition: int | None = None,
                    topic: str | None = None, headers: list | None = None) -> int:
    """Produce `command` keyed by its job_id (or schedule_id / worker_id / a pulse's gateway_id) to the owner's
    partition (a pulse: give `partition`), with `headers` (a traceparent, spotreel/runtime/tracing.py) if given."""
    from spotreel.platform.topics import commands_topic

    key = (getattr(command, "job_id", None) or getattr(command, "schedule_id", None)
           or getattr(command, "worker_id", None) or command.gateway_id)
    if partition is None:
        partition = partition_for(key, settings.partitions)
    prod.produce(topic or commands_topic(settings), value=codec.encode_message(command), key=key.encode(),
                 partition=partition, headers=headers)
    return partition


def read_partition(bootstrap: str, topic: str, partition: int, start: int = 0, end: int | None = None,
                   timeout: float = 10.0) -> Iterator[Any]:
    """Yield the messages of one partition from `start` up to `end` (default: the high watermark now)."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    c = consumer(bootstrap, "spotreel-reader", read_committed=True, extra={"enable.partition.eof": True})
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
