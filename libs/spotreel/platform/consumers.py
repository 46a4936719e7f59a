"""Kafka consumers: the one factory every confluent-kafka Consumer of the services, the worker and the
launcher comes from (the reader of a compacted topic into memory, adapters/compacted.py, is built on it).

`consumer` writes the settings a caller means as named options (the group, read_committed, how long a fetch
may wait, quiet librdkafka logs) and never commits on its own: every consumer here commits explicitly or
not at all (a reader that only assigns partitions names a group because librdkafka wants one).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from spotreel.config.settings import Settings


def batched_fetch(wait_ms: int) -> dict[str, Any]:
    """Consumer settings that fetch at most once per `wait_ms` while records trickle in (a fetch answers when
    64 KiB are there or `wait_ms` passed). librdkafka's defaults (fetch.min.bytes 1) answer a fetch as soon
    as one record is there and send the next at once: a consumer of a topic with a steady trickle of records
    sends a fetch per record or two, and the broker pays for each (bench/fetch_cost.py; bench/README.md, "Kafka:
    what an eager consumer costs the broker"). `wait_ms` is what the reader may lag."""
    return {"fetch.min.bytes": 65536, "fetch.wait.max.ms": wait_ms}


# What a member of a consumer group that commits its own offsets sets besides: a new group starts from the
# beginning, and a member that died is noticed within 10 s (the default 45 s would leave its partitions unread).
GROUP_MEMBER: dict[str, Any] = {"auto.offset.reset": "earliest", "session.timeout.ms": 10000,
                                "heartbeat.interval.ms": 2000}


def consumer_config(bootstrap: str, group_id: str, *, read_committed: bool = False, fetch_wait_ms: int | None = None,
                    quiet: bool = False, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The settings `consumer` passes to librdkafka. `read_committed`: skip the records of aborted
    transactions; `fetch_wait_ms`: adapters.kafka.batched_fetch (a fetch answers at 64 KiB or after this
    long); `quiet`: librdkafka logs errors only; `extra`: any other librdkafka setting, which wins."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group_id, "enable.auto.commit": False}
    if read_committed:
        conf["isolation.level"] = "read_committed"
    if fetch_wait_ms is not None:
        conf.update(batched_fetch(fetch_wait_ms))
    if quiet:
        conf["log_level"] = 3
    conf.update(extra or {})
    return conf


def consumer(bootstrap: str, group_id: str, *, read_committed: bool = False, fetch_wait_ms: int | None = None,
             quiet: bool = False, extra: Mapping[str, Any] | None = None) -> Any:
    """A confluent-kafka Consumer with `consumer_config`'s settings."""
    from confluent_kafka import Consumer

    return Consumer(consumer_config(bootstrap, group_id, read_committed=read_committed,
                                    fetch_wait_ms=fetch_wait_ms, quiet=quiet, extra=extra))


def private_group(settings: Settings, name: str) -> str:
    """A group id of this process alone, for a reader that assigns partitions and commits nothing."""
    return f"{settings.topic_prefix}.{name}.{uuid.uuid4().hex[:8]}"
