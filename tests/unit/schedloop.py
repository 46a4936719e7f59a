"""The scheduler's real batch loop (`Pipeline.on_batch`) in process: a Scheduler whose producer records what it
sends and acknowledges at once, and whose table writes go nowhere. For failures of one process's order of
work that a real Kafka cannot be made to reproduce on demand (a pause between two sends, a batch torn by a
crash); the real-server side of each is an integration test."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any, Callable
from unittest import mock

from spotreel.codec import Codec
from spotreel.config.settings import Settings

from spotreel.services.scheduler.partition import PartitionState


@dataclass
class Msg:
    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes
    headers: Any = None
    timestamp: float = 0.0
    timestamp_type: int = 0
    acked: bool = False


@dataclass
class Event:
    message: Msg


@dataclass
class Sent:
    topic: str
    key: bytes
    value: bytes
    partition: int
    headers: Any
    at_ms: int  # the test's clock when it was sent


class Producer:
    """Acknowledges every record; `on_send(topic)` runs as each is sent (a pause goes there)."""

    def __init__(self, on_send: Callable[[str], None], clock: list[int]) -> None:
        self.on_send = on_send
        self.clock = clock
        self.records: list[Sent] = []

    @property
    def sent(self) -> list[tuple[str, int]]:
        return [(r.topic, r.at_ms) for r in self.records]

    async def send(self, topic, key, value, partition, timestamp, headers):
        self.on_send(topic)
        self.records.append(Sent(topic, key, value, partition, headers, self.clock[0]))
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(mock.Mock(offset=len(self.records)))
        return fut

    def to(self, topic: str) -> list[Sent]:
        return [r for r in self.records if r.topic == topic]


def scheduler(tmp_path, clock: list[int], on_send: Callable[[str], None] = lambda topic: None,
              partitions: int = 1, prefix: str = "unit.loop"):
    from spotreel.services.scheduler.app import Scheduler

    settings = replace(Settings(), topic_prefix=prefix, partitions=partitions)
    sched = Scheduler(settings, data_dir=tmp_path)
    sched.table.send_changelog = lambda *a, **k: None
    producer = Producer(on_send, clock)
    sched.app._producer = producer  # noqa: SLF001 - Faust builds its producer lazily into this field
    for p in range(partitions):
        sched.parts[p] = PartitionState(p)
    return sched, producer


def run(sched, codec: Codec, commands: list[Any], first_offset: int, partition: int = 0,
        headers: Any = None, appended_ms: int | None = None) -> None:
    """The commands as records `first_offset`, `first_offset + 1`, ... of `partition`, in one batch."""
    stamp = {} if appended_ms is None else {"timestamp": appended_ms / 1000, "timestamp_type": 1}
    msgs = [Event(Msg(sched.commands, partition, first_offset + i, b"k", codec.encode_message(cmd), headers,
                      **stamp))
            for i, cmd in enumerate(commands)]
    asyncio.run(sched.on_batch(msgs))
