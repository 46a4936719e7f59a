"""What the gateway's integration tests share: a test's own topics and Cassandra keyspace, and the commands
the gateway put on Kafka read back by key."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from spotreel.adapters.kafka import delete_topics, read_partition
from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.platform.migrate import migrate
from spotreel.platform.topics import commands_topic, ensure_topics
from spotreel.config.settings import Settings


@contextmanager
def own_topics_and_keyspace(settings: Settings, unique: str, cql, **overrides: Any) -> Iterator[Settings]:
    """The settings on topics of the test's own prefix and a migrated keyspace named `unique` (two
    partitions); the topics are dropped when the block ends."""
    s = replace(settings, topic_prefix=f"test.{unique}", cassandra_keyspace=unique, partitions=2, **overrides)
    ensure_topics(s, say=lambda *a, **k: None)
    migrate(cql, unique, say=lambda *_: None)
    try:
        yield s
    finally:
        delete_topics(s)


def commands_keyed(settings: Settings, key: str) -> list:
    """Every command on the commands topic keyed by `key` (a job id, a schedule id), in order."""
    codec = Codec.default()
    part = partition_for(key, settings.partitions)
    msgs = read_partition(settings.kafka_bootstrap, commands_topic(settings), part, timeout=10)
    return [codec.decode_message(m.value()) for m in msgs if m.key() == key.encode()]
