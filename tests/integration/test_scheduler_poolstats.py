"""The pool-stats record the scheduler publishes on the compacted `<prefix>.pool-stats` topic, read back
from Kafka with the codec the way the gateway (ETA) and the capacity manager read it."""

from __future__ import annotations

import time
import uuid
from contextlib import closing

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.platform.topics import pool_stats_topic
from tests.integration.schedkit import (GPU, MODEL, POOL, Bus, SchedulerProc, drop_topics, make_topics,
                                        scheduler_settings, submit, teardown)


def _latest_stats(settings, codec, cons: Consumer, latest: dict) -> dict:
    for msg in cons.consume(200, 0.2):
        if not msg.error():
            latest[msg.key().decode()] = codec.decode_message(msg.value())
    return latest


def test_pool_stats_carry_queue_workers_durations_and_lease_losses(stack, tmp_path):
    settings = scheduler_settings("ps" + uuid.uuid4().hex[:10], partitions=1)
    make_topics(settings)
    bus = Bus(settings)
    proc = SchedulerProc(settings, tmp_path)
    cons = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"ps-{uuid.uuid4()}",
                     "enable.auto.commit": False})
    cons.assign([TopicPartition(pool_stats_topic(settings), 0, OFFSET_BEGINNING)])
    run = uuid.uuid4().hex[:6]
    try:
        proc.wait_owning({0})
        # A job run to the end with two checkpoints whose write times are reported (120 ms and 80 ms).
        done = submit("acme", f"{run}-done")
        bus.send(done)
        a = bus.request_work("w-done", timeout=60)
        assert a.job_id == done.job_id
        for step, ms in ((5, 120), (10, 80)):
            bus.send(c.RecordCheckpoint(bus.next_id(), done.job_id, a.epoch, "w-done", f"ck/{step}", step,
                                        step * 5.0, "sum", 10, duration_ms=ms))
        bus.send(c.CompleteJob(bus.next_id(), done.job_id, a.epoch, "w-done", "out.mp4", "sum", 1))
        bus.wait_event(done.job_id, ev.JobSucceeded, timeout=60)
        # A lease that is lost (no heartbeat), then the job leased again and held.
        lost = submit("acme", f"{run}-lost")
        bus.send(lost)
        b = bus.request_work("w-lost", ttl_ms=1500, timeout=60)
        assert b.job_id == lost.job_id
        bus.wait_event(lost.job_id, ev.LeaseExpired, timeout=60)
        held = bus.request_work("w-held", timeout=60)
        assert held.job_id == lost.job_id and held.epoch == b.epoch + 1
        # The queue is empty now: one worker waits idle, one drains.
        assert isinstance(bus.request_work("w-idle", timeout=0), ev.NoWorkAvailable)
        # and one with the pool's model loaded (warm)
        assert isinstance(bus.request_work("w-warm", timeout=0, warm=(POOL.rpartition("@")[0],)), ev.NoWorkAvailable)
        assert isinstance(bus.request_work("w-drain", draining=True), ev.NoWorkAvailable)
        # Two idle workers a gateway vouched for in its pulse (no request, no answer), one of them warm, and
        # one it vouched for that holds a lease here (w-held: not idle, the pulse may be older than the grant).
        bus.send(c.GatewayPulse(bus.next_id(), "gw-ps", int(time.time() * 1000), False,
                                (c.IdleWorker("w-vouched", GPU, (MODEL,)), c.IdleWorker("w-vouched-warm", GPU, (MODEL,), (MODEL,)),
                                 c.IdleWorker("w-held", GPU, (MODEL,)))), partition=0)
        queued = [submit("acme", f"{run}-q1", priority=5), submit("acme", f"{run}-q2"), submit("beta", f"{run}-q3")]
        for s in queued:
            bus.send(s)
        for s in queued:
            bus.wait_event(s.job_id, ev.JobQueued, timeout=60)

        latest: dict = {}
        deadline = time.monotonic() + 60
        while True:
            rec = _latest_stats(settings, bus.codec, cons, latest).get(f"{POOL}/0")
            if rec is not None and rec.queued == 3 and rec.draining_workers == 1 and rec.idle_workers == 5:
                break
            assert time.monotonic() < deadline, f"no pool-stats record with the 3 queued jobs; last: {rec}"
        assert isinstance(rec, ev.PoolStats) and (rec.pool, rec.partition) == (POOL, 0)
        assert rec.leased == 1 and rec.active_workers == 1
        # Idle: w-idle and w-warm, which asked, w-done, whose job completed (free at once, without asking
        # again), and the two vouched for; not w-lost, whose lease expired. Warm: w-warm and w-vouched-warm.
        assert rec.idle_workers == 5 and rec.draining_workers == 1 and rec.warm_idle_workers == 2
        assert sorted(rec.queued_by_tier) == ["0=2", "5=1"]
        assert sorted(rec.queued_by_tenant) == ["acme=2", "beta=1"]
        assert rec.oldest_wait_ms >= 0
        assert rec.mean_checkpoint_ms == 100.0
        assert rec.mean_run_ms > 0
        assert rec.lease_losses_1h == 1
        # One loss in less than an hour of leased time: at least one loss per leased hour (MTBF < 1 h).
        assert rec.lease_loss_rate_per_hour >= 1.0
        # The leased time the loss was counted over (the worker weighs it against its prior MTBF).
        assert 0 < rec.leased_seconds_1h < 3600
        assert rec.lease_loss_rate_per_hour == pytest.approx(3600 / rec.leased_seconds_1h, rel=0.05)
    except BaseException:
        print(f"----- tail of {proc.log_path.name} -----\n{proc.log()[-5000:]}")
        raise
    finally:
        cons.close()
        proc.stop()
        bus.close()
        drop_topics(settings)


def test_a_job_queued_in_an_empty_pool_is_published_at_once_not_at_the_next_tick(stack, tmp_path):
    """Idle workers ask where the pool stats show work (dispatch/asking.py): a job queued in a pool whose
    last stats showed nothing queued gets its record right after its batch. The tick here is 120 s, so a
    record within 30 s can only come from the batch; with a backlog (the second job) and no idle worker nothing
    extra is sent, and once an idle worker waits (a gateway's pulse vouched for it) the third job is published
    at once."""
    settings = scheduler_settings("pf" + uuid.uuid4().hex[:10], partitions=1)
    make_topics(settings)
    bus = Bus(settings)
    proc = SchedulerProc(settings, tmp_path, args=("--stats-interval", "120"))
    cons = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"pf-{uuid.uuid4()}",
                     "enable.auto.commit": False})
    cons.assign([TopicPartition(pool_stats_topic(settings), 0, OFFSET_BEGINNING)])
    run = uuid.uuid4().hex[:6]
    with teardown(settings, [proc], bus, tail=5000), closing(cons):
        proc.wait_owning({0})
        time.sleep(2.0)  # past the first tick, which Faust runs when the timer starts
        seen: list = []

        def records(wait_s: float) -> list:
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                for msg in cons.consume(200, 0.2):
                    if not msg.error() and msg.value() is not None:
                        seen.append(bus.codec.decode_message(msg.value()))
            return seen

        before = len(records(1.0))
        first = submit("acme", f"{run}-1")
        bus.send(first)
        bus.wait_event(first.job_id, ev.JobQueued, timeout=60)
        deadline = time.monotonic() + 30
        while not any(r.pool == POOL and r.queued == 1 for r in seen[before:]):
            assert time.monotonic() < deadline, f"no record with the queued job; seen {seen[before:]}"
            records(0.5)
        after_first = len(seen)
        second = submit("acme", f"{run}-2")
        bus.send(second)
        bus.wait_event(second.job_id, ev.JobQueued, timeout=60)
        records(3.0)
        assert not any(r.queued == 2 for r in seen[after_first:]), "a backlog published before the tick"
        # An idle worker a gateway vouches for (it sends no request of its own): the next job queued is
        # published at once, backlog or not, so the worker hears of it within a batch.
        bus.send(c.GatewayPulse(bus.next_id(), "gw-pf", int(time.time() * 1000), False,
                                (c.IdleWorker("w-idle", GPU, (MODEL,)),)), partition=0)
        third = submit("acme", f"{run}-3")
        bus.send(third)
        bus.wait_event(third.job_id, ev.JobQueued, timeout=60)
        deadline = time.monotonic() + 30
        while not any(r.pool == POOL and r.queued == 3 and r.idle_workers == 1 for r in seen[after_first:]):
            assert time.monotonic() < deadline, f"no record with the third job; seen {seen[after_first:]}"
            records(0.5)
