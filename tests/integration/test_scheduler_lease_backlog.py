"""Overload is latency, never lost leases (DESIGN invariant 8), against the real scheduler process and Kafka.

The scheduler is frozen (SIGSTOP) for longer than two lease TTLs while live workers keep renewing straight to
the commands topic, so it wakes up behind a backlog of renewals whose deadlines all passed by its clock. It
must judge each renewal by the time the broker appended it: the live leases survive, and only the worker
that went silent loses its lease, promptly once the backlog is read. Without a stall, a silent worker's
lease expires one TTL after its last renewal.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType

from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.devstack.kafka import admin_client
from spotreel.platform.topics import commands_topic
from tests.integration.leasekit import Renewer, leased
from tests.integration.schedkit import scheduler_plane, scheduler_settings

TTL_MS = 4_000
RENEW_EVERY_S = 1.0
STALL_S = 10.0  # > 2 TTLs


@pytest.fixture(scope="module")
def env(stack, tmp_path_factory):
    settings = scheduler_settings("lb" + uuid.uuid4().hex[:10], partitions=1)
    with scheduler_plane(settings, tmp_path_factory.mktemp("sched-lb")) as (proc, bus):
        try:
            yield settings, proc, bus
        finally:
            if proc.proc.poll() is None:  # a test that failed while the scheduler was frozen
                os.killpg(proc.proc.pid, signal.SIGCONT)


def test_the_commands_topic_is_stamped_by_the_broker(env) -> None:
    settings, _, _ = env
    admin = admin_client(settings.kafka_bootstrap, 10)
    res = ConfigResource(ResourceType.TOPIC, commands_topic(settings))
    config = admin.describe_configs([res])[res].result(10)
    assert config["message.timestamp.type"].value == "LogAppendTime"


def test_a_silent_worker_loses_its_lease_one_ttl_after_its_last_renewal(env) -> None:
    _, _, bus = env
    job_id, epoch, worker = leased(bus, "quiet", TTL_MS)
    bus.send(c.RenewLease(bus.next_id("renew"), job_id, epoch, worker))
    renewed = bus.wait_event(job_id, ev.LeaseRenewed)
    expired = bus.wait_event(job_id, ev.LeaseExpired, timeout=TTL_MS / 1000 + 15)
    late_by = expired.at_ms - renewed.lease_expires_at_ms
    assert 0 <= late_by < 3_000, f"expired {late_by} ms after its deadline"
    assert isinstance(bus.wait_event(job_id, ev.JobRequeued), ev.JobRequeued)


def test_a_stalled_scheduler_keeps_the_leases_renewed_in_time_and_expires_the_silent_one(env) -> None:
    settings, proc, bus = env
    live = [leased(bus, f"live{i}", TTL_MS) for i in range(3)]
    silent_job, silent_epoch, silent_worker = leased(bus, "silent", TTL_MS)
    renewers = [Renewer(settings, *lease, every_s=RENEW_EVERY_S) for lease in live]
    for r in renewers:
        r.start()
    time.sleep(1.5)
    os.killpg(proc.proc.pid, signal.SIGSTOP)
    stalled_at = time.time()
    try:
        time.sleep(STALL_S)
    finally:
        os.killpg(proc.proc.pid, signal.SIGCONT)
    resumed_at = time.time()
    # The silent worker's lease ends soon after the backlog is read.
    expired = bus.wait_event(silent_job, ev.LeaseExpired, timeout=30)
    assert expired.epoch == silent_epoch
    time.sleep(2.0)
    for r in renewers:
        r.stop()
    # Every renewal sent during the stall was accepted: the live leases never lapsed.
    for r in renewers:
        bus.wait_for(lambda r=r: bus.renewals_accepted(r.job_id) >= r.sent,
                     timeout=30, what=f"all {r.sent} renewals of {r.worker} applied")
        # This lease's part of the job's history (the job may have had an earlier test's lease).
        history = [e for e in bus.job_events(r.job_id) if getattr(e, "epoch", None) == r.epoch
                   or getattr(e, "epoch_given", None) == r.epoch]
        rejected = [e for e in history if isinstance(e, ev.CommandRejected) and e.command_type != "ExpireLease"]
        assert not rejected, rejected
        # The expiry timers waited for the backlog instead of sending ExpireLease records to be refused.
        timers = [e for e in history if isinstance(e, ev.CommandRejected) and e.command_type == "ExpireLease"]
        assert len(timers) <= 1, timers
        assert not any(isinstance(e, ev.LeaseExpired) for e in history), [
            (type(e).__name__, e.at_ms - int(stalled_at * 1000), e.causation_id, getattr(e, "lease_expires_at_ms", None))
            for e in history]
        assert bus.state(r.job_id).lease.epoch == r.epoch
    stall_renewals = sum(r.sent for r in renewers)
    assert stall_renewals >= 3 * STALL_S / RENEW_EVERY_S
    print(f"\nstalled {STALL_S:.0f} s (TTL {TTL_MS} ms) at {stalled_at:.1f}; {stall_renewals} renewals from 3 live "
          f"workers, all accepted; silent lease expired {expired.at_ms / 1000 - resumed_at:+.1f} s after resume")
