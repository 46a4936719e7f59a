"""The reader of a compacted topic into memory (adapters/compacted.py) against the real Kafka: it reads every
partition from the beginning, says when it has caught up with what the topic held, keeps following on its
thread, and a broker it cannot reach yet is tried again rather than failing the caller."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest
from confluent_kafka import Producer

from spotreel.adapters.compacted import CompactedReader
from spotreel.codec import Codec
from spotreel.domain import events as ev
from spotreel.platform.ports import free_port
from spotreel.config.settings import Settings

pytestmark = pytest.mark.integration


def _stats(pool: str, partition: int, queued: int) -> ev.PoolStats:
    return ev.PoolStats(pool=pool, partition=partition, at_ms=queued, queued=queued, leased=0, oldest_wait_ms=0)


def test_it_reads_what_the_topic_holds_then_follows_it(stack, make_topic) -> None:
    settings = replace(Settings.from_env(), kafka_bootstrap_servers=stack.kafka_bootstrap, partitions=2)
    topic = make_topic("compacted", partitions=2, config={"cleanup.policy": "compact"})
    codec = Codec.default()
    prod = Producer({"bootstrap.servers": stack.kafka_bootstrap})
    for partition in (0, 1):
        for queued in (1, 2, 3):
            rec = _stats("p", partition, queued)
            prod.produce(topic, codec.encode_message(rec), key=f"p/{partition}".encode(), partition=partition)
    prod.produce(topic, b"not a record", key=b"junk", partition=0)  # logged and skipped, not fatal
    assert prod.flush(10) == 0

    latest: dict[int, ev.PoolStats] = {}
    lock = threading.Lock()

    def keep(rec: ev.PoolStats) -> None:
        with lock:
            latest[rec.partition] = rec

    reader = CompactedReader(settings, "test-compacted", [topic], keep, codec=codec, fetch_wait_ms=10)
    try:
        reader.start()
        assert reader.started
        assert reader.caught_up.wait(20)
        with lock:
            assert {p: r.queued for p, r in latest.items()} == {0: 3, 1: 3}
        prod.produce(topic, codec.encode_message(_stats("p", 1, 9)), key=b"p/1", partition=1)
        assert prod.flush(10) == 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with lock:
                if latest[1].queued == 9:
                    break
            time.sleep(0.05)
        with lock:
            assert latest[1].queued == 9
    finally:
        reader.close()

    once: list[ev.PoolStats] = []
    CompactedReader(settings, "test-once", [topic], once.append, codec=codec).read_to_end(20)
    assert sorted((r.partition, r.queued) for r in once) == [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3), (1, 9)]


def test_an_empty_topic_is_caught_up_at_once(stack, make_topic) -> None:
    settings = replace(Settings.from_env(), kafka_bootstrap_servers=stack.kafka_bootstrap, partitions=1)
    topic = make_topic("empty", partitions=1, config={"cleanup.policy": "compact"})
    reader = CompactedReader(settings, "test-empty", [topic], lambda rec: None)
    try:
        reader.start()
        assert reader.caught_up.is_set()
    finally:
        reader.close()


def test_a_broker_not_up_yet_is_tried_again_on_the_thread() -> None:
    settings = replace(Settings.from_env(), kafka_bootstrap_servers=f"127.0.0.1:{free_port()}", partitions=1)
    reader = CompactedReader(settings, "test-retry", ["nowhere"], lambda rec: None, retry_s=0.2, end_timeout_s=0.5)
    started = time.monotonic()
    reader.start()  # returns at once: connecting is the thread's
    assert time.monotonic() - started < 1.0
    assert not reader.caught_up.is_set()
    reader.close()
    assert not reader._thread.is_alive()
