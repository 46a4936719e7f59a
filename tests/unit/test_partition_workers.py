"""The workers a partition heard from (services/scheduler/partition.py): least recently heard first, and
forgotten once past the window every reader looks at, so the per-second walks over them (pool stats,
preemption) cost the live fleet, not every worker that ever asked."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spotreel.domain.job_choice import QueuedJob
from spotreel.services.scheduler.partition import WORKER_WINDOW_MS, PartitionState, WorkerSeen
from spotreel.services.scheduler.poolstats import pool_stats
from spotreel.services.scheduler.preempting import FREE_WINDOW_MS, free_workers
from spotreel.services.scheduler.workerroll import WorkerRoll

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


def naive_free(part: PartitionState, pool: str, now: int) -> int:
    """preempting.free_workers before the roll kept its counts: a walk of every worker (no freed ones here)."""
    return sum(1 for w in part.workers.values() if pool in w.pools and w.idle and not w.draining
               and now - w.last_ms <= FREE_WINDOW_MS)


@given(st.lists(st.tuples(st.integers(0, 30), st.booleans(), st.integers(0, 5_000)), max_size=60),
       st.integers(0, 200_000))
def test_forgetting_changes_nothing_any_reader_counts(touches, now_offset) -> None:
    # Workers touched at increasing times (ask or renewal); what the pool stats and the free workers count
    # after forgetting is what a walk over the workers heard from within the window counts.
    part = PartitionState(0)
    at = 0
    for worker, renewal, step in touches:
        at += step
        if renewal:
            part.seen_worker(f"w{worker}", at, free=worker % 2 == 0)
        else:
            asked(part, f"w{worker}", at)
    everyone = dict(part.workers)
    now = max((w.last_ms for w in everyone.values()), default=0) + now_offset
    part.forget_workers(now)
    assert {k: w for k, w in everyone.items() if now - w.last_ms <= WORKER_WINDOW_MS} == dict(part.workers)
    part.index.add(QueuedJob("j", "t", 1, "m", "cpu", 0, 1.0))  # a job of POOL: the pool has a record
    (stats,) = pool_stats(part, now)
    assert stats.pool == POOL
    assert stats.idle_workers == sum(1 for w in part.workers.values() if w.idle and not w.draining)
    assert free_workers([part], POOL, now, lambda w: False) == naive_free(part, POOL, now)
    assert FREE_WINDOW_MS <= WORKER_WINDOW_MS


POOLS = ("a@x", "b@x", "c@y")
pools_st = st.lists(st.sampled_from(POOLS), unique=True, max_size=3).map(tuple)
op_st = st.one_of(
    st.tuples(st.just("ask"), st.integers(0, 12), st.booleans(), pools_st, pools_st, st.integers(0, 3_000)),
    st.tuples(st.just("heard"), st.integers(0, 12), st.booleans(), st.integers(0, 3_000)),
    st.tuples(st.just("took"), st.integers(0, 12)),
    st.tuples(st.just("forget"), st.integers(0, 70_000)),
)


@given(st.lists(op_st, max_size=80))
def test_the_counts_kept_per_pool_are_a_recount_of_the_workers_remembered(ops) -> None:
    # Whatever happens to the workers (asks with any pools, warm models and draining; renewals that free or
    # busy them; grants; forgetting), the roll's per-pool counts equal a walk over what it remembers, and
    # its order stays least recently heard first.
    roll = WorkerRoll()
    at = 0
    for op in ops:
        if op[0] == "ask":
            _, w, draining, pools, warm, step = op
            at += step
            roll.asked(f"w{w}", WorkerSeen(at, draining, pools, True, tuple(p for p in warm if p in pools)))
        elif op[0] == "heard":
            _, w, free, step = op
            at += step
            roll.heard(f"w{w}", at, free)
        elif op[0] == "took":
            roll.took_lease(f"w{op[1]}")
        else:
            roll.forget(at + op[1])
        for pool in POOLS:
            mine = {k: w for k, w in roll.items() if pool in w.pools}
            idle = {k for k, w in mine.items() if w.idle and not w.draining}
            assert set(roll.idle_since(pool, 0)) == idle and roll.idle_count(pool) == len(idle)
            assert roll.warm_idle_in(pool) == sum(1 for w in mine.values() if w.idle and not w.draining
                                                  and pool in w.warm)
            assert roll.draining_in(pool) == sum(1 for w in mine.values() if w.draining)
        times = [w.last_ms for w in roll.values()]
        assert times == sorted(times)


def test_a_worker_granted_a_lease_stops_counting_idle_and_keeps_its_place() -> None:
    part = PartitionState(0)
    asked(part, "a", 1_000)
    asked(part, "b", 2_000)
    part.worker_took_lease("a")
    assert set(part.workers.idle_since(POOL, 0)) == {"b"} and list(part.workers) == ["a", "b"]
    part.seen_worker("a", 3_000, free=True)  # its job completed
    assert set(part.workers.idle_since(POOL, 0)) == {"a", "b"} and list(part.workers) == ["b", "a"]
    with pytest.raises(TypeError):
        part.workers["c"] = WorkerSeen(3_000, False, (POOL,), True)  # type: ignore[index]
