"""Consumers that fetch in batches while records trickle in (adapters/kafka.py `batched_fetch`, the
scheduler's aiokafka consumer): each fetch waits for 64 KiB or its reader's latency bound, so a steady flow of
records no longer costs the broker a fetch per record or two."""

from __future__ import annotations

import aiokafka
import pytest

from spotreel.adapters.kafka import batched_fetch
from spotreel.services.scheduler.app import BatchedFetchThread, batch_fetches

pytestmark = pytest.mark.unit


def test_batched_fetch_bounds_the_wait_by_the_readers_latency() -> None:
    assert batched_fetch(100) == {"fetch.min.bytes": 65536, "fetch.wait.max.ms": 100}
    assert batched_fetch(10)["fetch.wait.max.ms"] == 10


async def test_the_schedulers_aiokafka_consumer_is_set_to_batch_before_it_starts() -> None:
    consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1")
    assert (consumer._fetch_min_bytes, consumer._fetch_max_wait_ms) == (1, 500)  # aiokafka's defaults
    batch_fetches(consumer, BatchedFetchThread.FETCH_MIN_BYTES, BatchedFetchThread.FETCH_MAX_WAIT_MS)
    assert (consumer._fetch_min_bytes, consumer._fetch_max_wait_ms) == (65536, 10)


def test_an_aiokafka_without_those_fields_is_refused_not_left_eager() -> None:
    class Renamed:
        pass

    with pytest.raises(RuntimeError, match="_fetch_min_bytes"):
        batch_fetches(Renamed(), 65536, 10)
