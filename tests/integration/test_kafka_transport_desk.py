"""The Kafka worker transport is its own lease desk (worker/transport_kafka.py), against the real scheduler
process and Kafka: a grant that reaches no `lease()` call is released (requeued at once, no attempt spent),
a later `lease()` call takes the grant of the request still outstanding instead of asking again, and a
worker never has two RequestWork unanswered at once.

The scheduler is stopped (SIGSTOP) while the job and the worker's RequestWork wait on the same commands
partition, so the grant is certain to come after the worker's `lease()` call returned."""

from __future__ import annotations

import os
import signal
import time
import uuid
from dataclasses import replace

import pytest

from spotreel.adapters.kafka import read_partition
from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.domain import commands as cmd
from spotreel.domain import events as ev
from spotreel.domain.leases import UNCLAIMED
from spotreel.platform.topics import commands_topic
from spotreel.worker.transport import LeaseLost, WorkerProfile
from spotreel.worker.transport_kafka import KafkaTransport
from tests.integration.schedkit import GPU, MODEL, scheduler_plane, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture
def plane(settings, unique, tmp_path):
    s = replace(settings, topic_prefix=f"test.{unique}", partitions=3)
    with scheduler_plane(s, tmp_path) as (proc, bus):
        yield s, proc, bus


def _worker_on(partition: int, partitions: int) -> str:
    """A worker id whose first RequestWork goes to `partition` (no pool stats yet: the ring starts there)."""
    while True:
        wid = f"kw-{uuid.uuid4().hex[:8]}"
        if partition_for(wid, partitions) == partition:
            return wid


def _requests_of(s, worker_id: str) -> list[cmd.RequestWork]:
    codec = Codec.default()
    out = []
    for p in range(s.partitions):
        for msg in read_partition(s.kafka_bootstrap, commands_topic(s), p):
            command = codec.decode_message(msg.value())
            if isinstance(command, cmd.RequestWork) and command.worker_id == worker_id:
                out.append(command)
    return out


def _asked_while_stopped(plane, tag: str):
    """A job queued behind a stopped scheduler and a lease() call that gives up before the grant."""
    s, proc, bus = plane
    job = submit("acme", f"{tag}-{uuid.uuid4().hex[:6]}")
    wid = _worker_on(partition_for(job.job_id, s.partitions), s.partitions)
    transport = KafkaTransport(s, WorkerProfile(wid, GPU, (MODEL,)), stale_s=60.0)
    os.killpg(proc.proc.pid, signal.SIGSTOP)
    try:
        bus.send(job)
        assert transport.lease(1.5) is None
    finally:
        os.killpg(proc.proc.pid, signal.SIGCONT)
    return job, wid, transport


def test_a_grant_no_lease_call_waits_for_is_released_not_left_to_its_ttl(plane) -> None:
    s, proc, bus = plane
    job, wid, transport = _asked_while_stopped(plane, "rel")
    try:
        leased = bus.wait_event(job.job_id, ev.JobLeased, 60)
        released = bus.wait_event(job.job_id, ev.LeaseReleased, 30)
        requeued = bus.wait_event(job.job_id, ev.JobRequeued, 30)
        assert leased.worker_id == wid
        assert (released.reason, released.epoch, released.worker_id, released.preemptions) == (
            UNCLAIMED, leased.epoch, wid, 0)
        assert requeued.reason == UNCLAIMED
        # Freed seconds after the grant, where the TTL (30 s) would have held it to the end of the test.
        assert released.at_ms - leased.at_ms < 10_000
        bus.poll(0.5)
        state = bus.state(job.job_id)
        assert state.attempts_used == 0 and state.preemptions == 0
        assert transport.released_unclaimed == 1
    finally:
        transport.close()


def test_the_next_lease_call_takes_the_outstanding_grant_without_asking_again(plane) -> None:
    s, proc, bus = plane
    job, wid, transport = _asked_while_stopped(plane, "claim")
    try:
        lease = transport.lease(30.0)
        assert lease is not None and lease.job_id == job.job_id and lease.worker_id == wid
        leased = bus.wait_event(job.job_id, ev.JobLeased, 30)
        assert lease.epoch == leased.epoch
        # One RequestWork in all: the second call waited for the first one's answer.
        assert len(_requests_of(s, wid)) == 1
        # It holds the lease as any: a heartbeat is accepted and nothing hands it back.
        verdict = transport.heartbeat(lease)
        assert verdict.accepted, verdict
        bus.poll(1.0)
        assert not [e for e in bus.job_events(job.job_id) if isinstance(e, (ev.LeaseReleased, ev.LeaseExpired))]
        assert transport.released_unclaimed == 0
    finally:
        transport.close()


def test_a_renewal_is_answered_pending_within_a_second_and_its_late_refusal_told_next(plane) -> None:
    # As the gateway answers an HTTP worker: a renewal behind a stopped scheduler is pending after about
    # answer_seconds, not the whole verdict wait; the refusal that comes once the scheduler resumes (its lease
    # was released meanwhile) is the answer to the next renewal, though that one's own verdict is pending too.
    s, proc, bus = plane
    job = submit("acme", f"late-{uuid.uuid4().hex[:6]}")
    wid = _worker_on(partition_for(job.job_id, s.partitions), s.partitions)
    transport = KafkaTransport(s, WorkerProfile(wid, GPU, (MODEL,)), stale_s=60.0, answer_seconds=1.0)
    try:
        bus.send(job)
        lease = transport.lease(30.0)
        assert lease is not None and lease.job_id == job.job_id
        assert transport.heartbeat(lease).accepted  # the first renewal confirms the lease
        os.killpg(proc.proc.pid, signal.SIGSTOP)
        try:
            bus.send(cmd.ReleaseLease(bus.next_id("rel"), job.job_id, lease.epoch, wid, "preempted"))
            started = time.monotonic()
            first = transport.heartbeat(lease)
            took = time.monotonic() - started
        finally:
            os.killpg(proc.proc.pid, signal.SIGCONT)
        assert first.pending and not first.accepted and first.renew_in_s, first
        assert took < 3.0, took  # the verdict wait is 10 s; the answer came after about a second
        bus.wait_event(job.job_id, ev.LeaseReleased, 30)
        rejected = bus.wait_for(lambda: [e for e in bus.job_events(job.job_id) + bus.job_replies(job.job_id)
                                         if isinstance(e, ev.CommandRejected) and e.command_type == "RenewLease"],
                                30, "the pending renewal refused")
        assert rejected[0].reason == "stale_epoch", rejected
        bus.wait_for(lambda: transport._late.kept(job.job_id, lease.epoch, wid) is not None,  # noqa: SLF001
                     10, "the transport's own listener to read the refusal")
        os.killpg(proc.proc.pid, signal.SIGSTOP)
        try:
            with pytest.raises(LeaseLost) as lost:
                transport.heartbeat(lease)  # its own verdict cannot come: the scheduler is stopped
        finally:
            os.killpg(proc.proc.pid, signal.SIGCONT)
        assert lost.value.reason == rejected[0].reason
    finally:
        transport.close()
