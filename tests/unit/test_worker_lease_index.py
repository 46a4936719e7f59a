"""The worker-lease index (services/scheduler/workerleases.py) keeps the workers holding two leases or more
as records arrive, so the stats tick looks at those instead of every lease of the partition."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spotreel.codec import Codec
from spotreel.domain.events import WorkerLeaseHeld
from spotreel.services.scheduler.workerleases import WorkerLeaseIndex
from spotreel.config.settings import Settings

pytestmark = pytest.mark.unit
SETTINGS, CODEC = Settings(), Codec.default()  # built once: most of an example's time otherwise


def test_a_worker_granted_twice_is_doubly_held_until_one_lease_ends() -> None:
    index = WorkerLeaseIndex(SETTINGS, CODEC)
    index.apply(WorkerLeaseHeld("w", "a", 1, 0, 1_000))
    assert index.doubly_held() == []
    index.apply(WorkerLeaseHeld("w", "b", 1, 3, 1_001))
    index.apply(WorkerLeaseHeld("v", "c", 1, 3, 1_001))
    assert index.doubly_held() == ["w"]
    index.apply(WorkerLeaseHeld("w", "b", 1, 3, 1_001, held=False))
    assert index.doubly_held() == [] and [r.job_id for r in index.held_by("w")] == ["a"]


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), st.integers(1, 3), st.booleans()), max_size=60))
def test_the_doubly_held_workers_are_those_the_index_shows_with_two_leases(records) -> None:
    index = WorkerLeaseIndex(SETTINGS, CODEC)
    for worker, job, epoch, held in records:
        index.apply(WorkerLeaseHeld(f"w{worker}", f"j{job}", epoch, job % 2, 0, held=held))
        assert sorted(index.doubly_held()) == sorted(
            f"w{w}" for w in range(4) if len(index.held_by(f"w{w}")) >= 2)
