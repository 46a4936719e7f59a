"""The scheduler's parts each work alone, given only what their constructors name (app.py builds them).

Stand-ins here are only the I/O a part is handed: a table's dict and changelog, a producer that acknowledges
at once. The real process's order of work is tests/unit/schedloop.py's and the integration tests'."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from spotreel.codec import Codec
from spotreel.domain import events as ev
from spotreel.config.settings import Settings

from spotreel.services.scheduler.metrics import Metrics
from spotreel.services.scheduler.partition import PartitionState
from spotreel.services.scheduler.publishing import Publisher
from spotreel.services.scheduler.stats import Eviction
from spotreel.services.scheduler.table import Store, meta_key
from spotreel.services.scheduler.workerleases import WorkerLeaseIndex, record_key


class Table:
    """A job table's two faces the store uses: its data and its changelog."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.changelog: list[tuple[int, bytes, bytes | None]] = []

    def send_changelog(self, p: int, key: bytes, value: bytes | None) -> None:
        self.changelog.append((p, key, value))


class Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes, int]] = []
        self.acked = 0

    async def send(self, topic: str, key: bytes, value: bytes, partition: int, timestamp: Any, headers: Any):
        self.sent.append((topic, key, value, partition))
        fut = asyncio.get_running_loop().create_future()
        fut.add_done_callback(lambda _: setattr(self, "acked", self.acked + 1))
        fut.set_result(SimpleNamespace(offset=len(self.sent)))
        return fut


def test_the_store_writes_through_to_the_changelog_and_reads_through_its_cache() -> None:
    table = Table()
    store = Store(table, partitions=6)
    part = PartitionState(2)
    part.events_offset = 41
    assert store.get("j1") is None
    store.put_marker(part)
    store.put(2, b"j1", b"raw")
    store.delete(2, b"j1")
    assert table.changelog == [(2, meta_key(2), b'{"events_offset": 41}'), (2, b"j1", b"raw"), (2, b"j1", None)]
    assert b"j1" not in table.data and table.data[meta_key(2)]
    # What the pipeline decides against is the cache; the table is read only for a job not in it.
    sentinel: Any = SimpleNamespace(job_id="j2")
    store.cache["j2"] = sentinel
    assert store.get("j2") is sentinel
    store.clear_caches()
    assert store.get("j2") is None and store.cache == {"j2": None}


def test_the_publisher_applies_lease_news_to_the_local_index_before_sending_and_awaits_every_ack() -> None:
    settings = replace(Settings(), topic_prefix="unit.parts", partitions=6)
    producer = Producer()
    index = WorkerLeaseIndex(settings, Codec.default())
    publisher = Publisher(SimpleNamespace(producer=producer), settings, Codec.default(), Metrics(),
                          fair=SimpleNamespace(), worker_leases=index, usage=None, budget=None)
    part = PartitionState(3)
    held = ev.WorkerLeaseHeld("w1", "j1", 1, 3, 1_000)
    part.lease_news.append(held)
    asyncio.run(publisher.publish_leases(part))
    assert part.lease_news == []
    assert [r.job_id for r in index.held_by("w1")] == ["j1"]
    assert [(t, k) for t, k, _, _ in producer.sent] == [("unit.parts.worker-leases", record_key("w1", "j1"))]
    assert producer.acked == 1


def test_the_eviction_tick_waits_for_a_rebuild_and_for_a_batch() -> None:
    table = Table()
    rebuilding = [True]
    lock = asyncio.Lock()
    parts = {0: PartitionState(0)}
    consumer = SimpleNamespace(assignment=lambda: [])
    eviction = Eviction(SimpleNamespace(consumer=consumer), "unit.parts.commands", parts, Store(table, 1),
                        Metrics(), lock, lambda: rebuilding[0])
    swept: list[int] = []
    eviction._evict_partition = lambda p, part, now: swept.append(p)  # type: ignore[method-assign]

    async def ticks() -> None:
        await eviction.evict()  # rebuilding: nothing
        rebuilding[0] = False
        async with lock:
            await eviction.evict()  # a batch holds the lock: nothing
        await eviction.evict()  # owns nothing (the consumer's assignment is empty): nothing
        eviction.owned = lambda: {0}  # type: ignore[method-assign]
        await eviction.evict()

    asyncio.run(ticks())
    assert swept == [0]
