"""The workers a partition heard from (services/scheduler/partition.py): least recently heard first, and
forgotten once past the window every reader looks at, so the per-second walks over them (pool stats,
preemption) cost the live fleet, not every worker that ever asked."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spotreel.services.scheduler.partition import WORKER_WINDOW_MS, PartitionState, WorkerSeen
from spotreel.services.scheduler.poolstats import pool_stats
from spotreel.services.scheduler.preempting import FREE_WINDOW_MS, free_workers

pytestmark = pytest.mark.unit
POOL = "m@cpu"


def asked(part: PartitionState, worker: str, at_ms: int) -> None:
    part.worker_asked(worker, WorkerSeen(at_ms, False, (POOL,), True))


def test_a_fleet_that_came_and_went_is_forgotten_and_the_live_workers_stay() -> None:
    part = PartitionState(0)
    for i in range(5000):  # spot machines that asked once and are gone
        asked(part, f"gone-{i}", 1_000)
    asked(part, "renewing", 1_000)
    asked(part, "idle", 50_000)
    part.seen_worker("renewing", 55_000)  # its lease's commands keep it fresh
    assert part.forget_workers(61_001) == 5000
    assert list(part.workers) == ["idle", "renewing"]  # least recently heard first
    assert part.forget_workers(61_002) == 0
    part.seen_worker("renewing", 95_000)
    assert part.forget_workers(110_001) == 1 and list(part.workers) == ["renewing"]
    part.seen_worker("never-asked", 110_001)  # only a worker that asked is tracked
    assert list(part.workers) == ["renewing"]


@given(st.lists(st.tuples(st.integers(0, 30), st.booleans(), st.integers(0, 5_000)), max_size=60),
       st.integers(0, 200_000))
def test_forgetting_changes_nothing_any_reader_counts(touches, now_offset) -> None:
    # Workers touched at increasing times (ask or renewal); the pool stats and the free workers counted with
    # and without forgetting are the same.
    def build() -> PartitionState:
        part = PartitionState(0)
        at = 0
        for worker, renewal, step in touches:
            at += step
            if renewal:
                part.seen_worker(f"w{worker}", at, free=worker % 2 == 0)
            else:
                asked(part, f"w{worker}", at)
        return part

    full, pruned = build(), build()
    now = max((w.last_ms for w in full.workers.values()), default=0) + now_offset
    pruned.forget_workers(now)
    assert all(now - w.last_ms <= WORKER_WINDOW_MS for w in pruned.workers.values())
    assert pool_stats(full, now) == pool_stats(pruned, now)
    assert free_workers([full], POOL, now, lambda w: False) == free_workers([pruned], POOL, now, lambda w: False)
    assert FREE_WINDOW_MS <= WORKER_WINDOW_MS
