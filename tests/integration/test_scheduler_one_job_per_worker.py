"""One job per worker in the control plane (services/scheduler/workerleases.py), against the real scheduler
process and Kafka: a worker that holds a lease from one partition gets no second lease from another, nor
from its own replayed RequestWork; two partitions asked at the very same moment end with one lease; and once
the lease ends the worker gets work again."""

from __future__ import annotations

import time
import uuid

import pytest

from spotreel.adapters.partitioning import partition_for
from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.domain.state import Status
from tests.integration.schedkit import GPU, MODEL, Bus, scheduler_plane, scheduler_settings, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture
def env(stack, tmp_path):
    settings = scheduler_settings("ow" + uuid.uuid4().hex[:10], partitions=2)
    with scheduler_plane(settings, tmp_path, tail=4000) as (_, bus):
        yield settings, bus


def _job_on(partition: int, tag: str):
    while True:
        job = submit("acme", f"{tag}-{uuid.uuid4().hex[:8]}")
        if partition_for(job.job_id, 2) == partition:
            return job


def _ask(bus: Bus, worker: str, partition: int, request_id: str | None = None):
    rid = request_id or bus.next_id(f"rw-{worker}")
    bus.send(c.RequestWork(rid, worker, GPU, (MODEL,), (), False, 60_000, int(time.time() * 1000)),
             partition=partition)
    return rid, bus.wait_for(lambda: bus.answers.get(rid), 20, f"answer to {rid}")


def _held_by(bus: Bus, worker: str, jobs) -> list[str]:
    return [j.job_id for j in jobs if (s := bus.state(j.job_id)) is not None and s.lease is not None
            and s.lease.worker_id == worker and s.status in Status.HOLDING_LEASE]


def test_a_worker_holding_a_lease_gets_no_second_one_from_any_partition(env) -> None:
    settings, bus = env
    a, b = _job_on(0, "a"), _job_on(1, "b")
    for job in (a, b):
        bus.send(job)
        bus.wait_event(job.job_id, ev.JobQueued)
    worker = f"w-{uuid.uuid4().hex[:6]}"
    rid, first = _ask(bus, worker, 0)
    assert isinstance(first, ev.WorkAssigned) and first.job_id == a.job_id
    # The other partition has queued work and still refuses this worker.
    _, second = _ask(bus, worker, 1)
    assert isinstance(second, ev.NoWorkAvailable) and second.reason == "worker_holds_lease", second
    # Its own RequestWork again, as a retry or a replay would send it (same request id, same partition).
    bus.answers.pop(rid)
    _, again = _ask(bus, worker, 0, request_id=rid)
    assert not (isinstance(again, ev.WorkAssigned) and again.job_id != a.job_id), again
    bus.poll(1.0)
    assert [e.job_id for e in bus.events if isinstance(e, ev.JobLeased) and e.worker_id == worker] == [a.job_id]
    # Once its lease ends, it is served again, by the other partition.
    bus.send(c.CompleteJob(bus.next_id("done"), a.job_id, first.epoch, worker, "videos/a.mp4", "0" * 64, 1))
    bus.wait_event(a.job_id, ev.JobSucceeded)
    deadline = time.monotonic() + 20
    while True:
        _, third = _ask(bus, worker, 1)
        if isinstance(third, ev.WorkAssigned) or time.monotonic() > deadline:
            break
        time.sleep(0.3)  # the lease's end reaches the other partition's index through the topic
    assert isinstance(third, ev.WorkAssigned) and third.job_id == b.job_id, third


def test_two_partitions_asked_at_once_leave_the_worker_one_lease(env) -> None:
    settings, bus = env
    jobs = [_job_on(0, "x"), _job_on(1, "y")]
    for job in jobs:
        bus.send(job)
        bus.wait_event(job.job_id, ev.JobQueued)
    worker = f"w-{uuid.uuid4().hex[:6]}"
    rids = [bus.next_id(f"rw-{worker}") for _ in (0, 1)]
    for p, rid in enumerate(rids):  # back to back: neither partition has heard of the other's grant
        bus.send(c.RequestWork(rid, worker, GPU, (MODEL,), (), False, 60_000, int(time.time() * 1000)),
                 partition=p)
    bus.wait_for(lambda: all(bus.answers.get(r) for r in rids), 20, "both answers")
    bus.wait_for(lambda: len(_held_by(bus, worker, jobs)) == 1, 20, "one lease left")
    time.sleep(2.0)
    bus.poll(0.5)
    assert len(_held_by(bus, worker, jobs)) == 1
    granted = [bus.answers[r] for r in rids if isinstance(bus.answers[r], ev.WorkAssigned)]
    released = [e for e in bus.events if isinstance(e, ev.LeaseReleased) and e.worker_id == worker]
    # Either the second partition already refused, or it granted and handed its lease back as unclaimed.
    assert len(granted) - len(released) == 1, (granted, released)
    assert all(e.reason == "unclaimed" and e.preemptions == 0 for e in released)


def test_a_request_for_a_lease_no_grant_could_hold_is_refused_and_costs_the_queue_nothing(env) -> None:
    """A RequestWork with a TTL of 0, or one that would end the lease after year 9999 (limits.lease_ttl_fits),
    is answered invalid_lease_ttl before any job is tried: trying them, each refused grant would drop that job
    from the partition's queue index. The queued job is granted to the next valid request."""
    settings, bus = env
    job = _job_on(0, "ttl")
    bus.send(job)
    bus.wait_event(job.job_id, ev.JobQueued)
    worker = f"w-{uuid.uuid4().hex[:6]}"
    for ttl in (0, 2**62):
        rid = bus.next_id(f"rw-{worker}")
        bus.send(c.RequestWork(rid, worker, GPU, (MODEL,), (), False, ttl, int(time.time() * 1000)), partition=0)
        answer = bus.wait_for(lambda: bus.answers.get(rid), 20, f"answer to {rid}")
        assert isinstance(answer, ev.NoWorkAvailable) and answer.reason == "invalid_lease_ttl", answer
    _, granted = _ask(bus, worker, 0)
    assert isinstance(granted, ev.WorkAssigned) and granted.job_id == job.job_id, granted
