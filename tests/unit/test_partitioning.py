"""The pinned partitioner equals Kafka's default (murmur2) as aiokafka/Faust and the Java client use it."""

from __future__ import annotations

import pytest
from aiokafka.partitioner import DefaultPartitioner, murmur2
from hypothesis import given
from hypothesis import strategies as st

from spotreel.adapters.partitioning import murmur2 as ours
from spotreel.adapters.partitioning import partition_for

pytestmark = pytest.mark.unit


@given(st.binary(max_size=64), st.integers(1, 64))
def test_matches_aiokafka(data: bytes, n: int) -> None:
    assert ours(data) & 0xFFFFFFFF == murmur2(data)
    assert partition_for(data, n) == DefaultPartitioner()(data, list(range(n)), list(range(n)))


def test_known_java_values() -> None:
    # From the Java client's test suite (Utils.murmur2 of these strings).
    assert ours(b"21") == -973932308
    assert ours(b"foobar") == -790332482
    assert partition_for("foobar", 6) == (-790332482 & 0x7FFFFFFF) % 6
