"""Consumers that fetch in batches while records trickle in (adapters/kafka.py `batched_fetch`): each fetch
waits for 64 KiB or its reader's latency bound, so a steady flow of records does not cost the broker a fetch
per record or two."""

from __future__ import annotations

import pytest

from spotreel.adapters.kafka import batched_fetch

pytestmark = pytest.mark.unit


def test_batched_fetch_bounds_the_wait_by_the_readers_latency() -> None:
    assert batched_fetch(100) == {"fetch.min.bytes": 65536, "fetch.wait.max.ms": 100}
    assert batched_fetch(10)["fetch.wait.max.ms"] == 10
