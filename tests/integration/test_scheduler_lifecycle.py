"""Every job transition through the real scheduler process and Kafka, with simulated workers.

One scheduler process serves the whole module (its start and rebalance cost seconds); each test uses its
own job ids, so tests do not see each other's jobs.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest

from spotreel.adapters.partitioning import partition_for
from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.domain.state import Status
from tests.integration.schedkit import (ROOT, Bus, SchedulerProc, drop_topics, make_topics, scheduler_plane,
                                        scheduler_settings, submit)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def env(stack, tmp_path_factory):
    settings = scheduler_settings("m" + uuid.uuid4().hex[:10], partitions=3)
    with scheduler_plane(settings, tmp_path_factory.mktemp("sched")) as (proc, bus):
        yield settings, proc, bus, None


@pytest.fixture(scope="module")
def metrics_env(stack, tmp_path_factory):
    settings = scheduler_settings("x" + uuid.uuid4().hex[:10], partitions=1)
    make_topics(settings)
    port = _free_port()
    proc = SchedulerProc(settings, tmp_path_factory.mktemp("schedm"), "m", args=("--metrics-port", str(port)))
    try:
        yield settings, port, proc
    finally:
        proc.stop()
        drop_topics(settings)


def _job(bus: Bus, **kw) -> c.SubmitJob:
    # A model (so a pool) of its own: workers asking for it see no other test's jobs.
    key = uuid.uuid4().hex[:8]
    sub = submit("acme", key, **{"model": f"m-{key}", **kw})
    bus.send(sub)
    return sub


def _lease(bus: Bus, job_id: str, worker: str, ttl_ms: int = 30_000) -> ev.WorkAssigned:
    a = bus.request_work(worker, ttl_ms=ttl_ms, model=bus.state(job_id).spec.model)
    assert isinstance(a, ev.WorkAssigned) and a.job_id == job_id, a
    return a


def test_happy_path_submit_lease_progress_checkpoint_complete(env):
    settings, _, bus, _ = env
    sub = _job(bus)
    assert bus.wait_event(sub.job_id, ev.JobQueued).reason == "submitted"
    a = _lease(bus, sub.job_id, "w-happy")
    leased = bus.wait_event(sub.job_id, ev.JobLeased, count=1)
    assert (leased.epoch, leased.worker_id) == (a.epoch, "w-happy")
    assert a.spec == sub.spec and a.resume_checkpoint_key is None
    bus.send(c.RenewLease(bus.next_id(), sub.job_id, a.epoch, "w-happy"))
    bus.send(c.ReportProgress(bus.next_id(), sub.job_id, a.epoch, "w-happy", 5, 25.0, "denoising"))
    bus.send(c.RecordCheckpoint(bus.next_id(), sub.job_id, a.epoch, "w-happy", "ck/5", 5, 25.0, "sum", 10))
    bus.send(c.CompleteJob(bus.next_id(), sub.job_id, a.epoch, "w-happy", "out.mp4", "sum2", 99))
    bus.wait_event(sub.job_id, ev.JobSucceeded)
    kinds = [type(e).__name__ for e in bus.job_events(sub.job_id)]
    assert "LeaseRenewed" in kinds and "ProgressReported" in kinds and "CheckpointRecorded" in kinds
    assert bus.state(sub.job_id).status == Status.SUCCEEDED
    versions = [e.version for e in bus.job_events(sub.job_id) if not isinstance(e, ev.CommandRejected)]
    assert versions == list(range(1, len(versions) + 1))


def test_lease_expiry_requeues_with_checkpoint_and_lost_worker_is_rejected(env):
    settings, _, bus, _ = env
    sub = _job(bus)
    bus.wait_event(sub.job_id, ev.JobQueued)
    a = _lease(bus, sub.job_id, "w-slow", ttl_ms=1500)
    bus.send(c.RecordCheckpoint(bus.next_id(), sub.job_id, a.epoch, "w-slow", "ck/3", 3, 15.0, "s", 1))
    bus.wait_event(sub.job_id, ev.CheckpointRecorded)
    # The worker "pauses" past its expiry: the owner's clock expires the lease and requeues the job.
    bus.wait_event(sub.job_id, ev.LeaseExpired, timeout=15)
    assert bus.wait_event(sub.job_id, ev.JobRequeued).reason == "lease_expired"
    b = _lease(bus, sub.job_id, "w-fresh")
    assert b.epoch == a.epoch + 1 and b.resume_checkpoint_key == "ck/3" and b.resume_step == 3
    # The paused worker resumes: every command it sends under its old epoch is rejected, none applied.
    old = [c.RenewLease(bus.next_id(), sub.job_id, a.epoch, "w-slow"),
           c.ReportProgress(bus.next_id(), sub.job_id, a.epoch, "w-slow", 9, 45.0, "denoising"),
           c.RecordCheckpoint(bus.next_id(), sub.job_id, a.epoch, "w-slow", "ck/9", 9, 45.0, "s", 1),
           c.FailJob(bus.next_id(), sub.job_id, a.epoch, "w-slow", "oom", "x", True),
           c.ReleaseLease(bus.next_id(), sub.job_id, a.epoch, "w-slow", "sigterm"),
           c.CompleteJob(bus.next_id(), sub.job_id, a.epoch, "w-slow", "out.mp4", "s", 1)]
    for cmd in old:
        bus.send(cmd)
    ids = {cmd.command_id for cmd in old}
    rejected = bus.wait_for(lambda: (lambda r: r if len(r) == len(ids) else None)(
        [e for e in bus.job_events(sub.job_id) if isinstance(e, ev.CommandRejected) and e.causation_id in ids]),
        what="all stale commands rejected")
    assert {r.reason for r in rejected} == {"stale_epoch"}
    state = bus.state(sub.job_id)
    assert state.status == Status.LEASED and state.lease.worker_id == "w-fresh" and state.checkpoints[-1].key == "ck/3"


def test_release_requeues_at_once_and_failure_backs_off_then_activates(env):
    settings, _, bus, _ = env
    sub = _job(bus, max_attempts=3, backoff_base_ms=400, backoff_max_ms=400)
    bus.wait_event(sub.job_id, ev.JobQueued)
    a = _lease(bus, sub.job_id, "w-pre")
    bus.send(c.ReleaseLease(bus.next_id(), sub.job_id, a.epoch, "w-pre", "spot_warning"))
    assert bus.wait_event(sub.job_id, ev.JobRequeued).reason == "released"
    b = _lease(bus, sub.job_id, "w-fail")
    bus.send(c.FailJob(bus.next_id(), sub.job_id, b.epoch, "w-fail", "cuda", "boom", True))
    assert bus.wait_event(sub.job_id, ev.JobScheduled).reason == "backoff"
    # The backoff timer fires ActivateJob through the same decide path.
    assert bus.wait_event(sub.job_id, ev.JobQueued, count=2, timeout=10).reason == "due"
    c3 = _lease(bus, sub.job_id, "w-fail2")
    bus.send(c.FailJob(bus.next_id(), sub.job_id, c3.epoch, "w-fail2", "bad_prompt", "no", False))
    bus.wait_event(sub.job_id, ev.JobFailed)
    bus.send(c.RequeueJob(bus.next_id(), sub.job_id, "operator"))
    assert bus.wait_event(sub.job_id, ev.JobRequeued, count=2).budget_reset is True


def test_run_at_cancel_pause_resume_reprioritize_dag(env):
    settings, _, bus, _ = env
    later = _job(bus, run_at_ms=int(time.time() * 1000) + 1200)
    bus.wait_event(later.job_id, ev.JobScheduled)
    assert bus.wait_event(later.job_id, ev.JobQueued, timeout=10).reason == "due"

    j = _job(bus)
    bus.wait_event(j.job_id, ev.JobQueued)
    bus.send(c.Reprioritize(bus.next_id(), j.job_id, 5))
    bus.wait_event(j.job_id, ev.JobReprioritized)
    bus.send(c.PauseJob(bus.next_id(), j.job_id, "user"))
    bus.wait_event(j.job_id, ev.JobPaused)
    bus.send(c.ResumeJob(bus.next_id(), j.job_id))
    assert bus.wait_event(j.job_id, ev.JobResumed).status == Status.QUEUED
    a = _lease(bus, j.job_id, "w-cancel")
    bus.send(c.CancelJob(bus.next_id(), j.job_id, "user"))
    bus.wait_event(j.job_id, ev.CancelRequested)
    bus.send(c.CompleteJob(bus.next_id(), j.job_id, a.epoch, "w-cancel", "o", "s", 1))
    late = bus.wait_event(j.job_id, ev.CommandRejected)
    assert late.reason == "cancel_requested"
    bus.send(c.ReleaseLease(bus.next_id(), j.job_id, a.epoch, "w-cancel", "cancelled"))
    bus.wait_event(j.job_id, ev.JobCancelled)

    # A parent that is already terminal (j was cancelled) answers the child's watch at once; `continue`
    # runs the child anyway (test_scheduler_dag_cron.py covers the rest of the DAG).
    child = _job(bus, parents=(j.job_id,), dag_policy="continue")
    bus.wait_event(child.job_id, ev.JobWaiting)
    assert bus.wait_event(child.job_id, ev.ParentResolved).outcome == "cancelled"
    assert bus.wait_event(child.job_id, ev.JobQueued).reason == "parents_resolved"


def test_unknown_job_draining_worker_and_poison_input(env):
    settings, _, bus, _ = env
    ghost = "jnothere" + uuid.uuid4().hex[:8]
    bus.send(c.CancelJob(bus.next_id(), ghost, "user"))
    assert bus.wait_event(ghost, ev.CommandRejected).reason == "unknown_job"
    answer = bus.request_work("w-drain", draining=True)
    assert isinstance(answer, ev.NoWorkAvailable) and answer.reason == "draining"
    # Poison: garbage bytes, and a valid command on a partition that does not own its job.
    bus.send_raw(b"k", b"\x00not avro", 0)
    sub = submit("acme", uuid.uuid4().hex[:8])
    bad_p = (partition_for(sub.job_id, settings.partitions) + 1) % settings.partitions
    bus.send(sub, partition=bad_p)
    after = _job(bus)  # processing continues
    bus.wait_event(after.job_id, ev.JobQueued)
    dead = bus.wait_for(lambda: (lambda d: d if len(d) >= 2 else None)(bus.deadletters()), what="dead letters")
    by_reason = {d["reason"]: d for d in dead}
    assert by_reason["bad_marker"]["original"] == b"\x00not avro" and by_reason["bad_marker"]["source_offset"] >= 0
    assert by_reason["wrong_partition"]["source_partition"] == bad_p
    assert not bus.job_events(sub.job_id)


def test_pool_stats_and_replay(env):
    settings, _, bus, _ = env
    sub = _job(bus)
    bus.wait_event(sub.job_id, ev.JobQueued)
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from spotreel.platform.topics import pool_stats_topic

    cons = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": uuid.uuid4().hex})
    cons.assign([TopicPartition(pool_stats_topic(settings), p, OFFSET_BEGINNING) for p in range(3)])
    seen = {}
    deadline = time.time() + 10
    while time.time() < deadline and not any(s.queued for s in seen.values()):
        for m in cons.consume(100, 0.5):
            if not m.error():
                s = bus.codec.decode_message(m.value())
                seen[(s.pool, s.partition)] = s
    cons.close()
    assert any(s.queued >= 1 and s.pool == f"{sub.spec.model}@cpu" for s in seen.values()), seen

    envv = {**__import__("os").environ, "SPOTREEL_TOPIC_PREFIX": settings.topic_prefix, "SPOTREEL_PARTITIONS": "3"}
    out = subprocess.run([sys.executable, "-m", "spotreel.cli", "replay", sub.job_id], cwd=ROOT, env=envv,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "JobSubmitted" in out.stdout and "JobQueued" in out.stdout and "now queued" in out.stdout
    time.sleep(1.5)  # let the table's changelog catch up with the last events
    rebuilt = subprocess.run([sys.executable, "-m", "spotreel.cli", "replay", "--rebuild"], cwd=ROOT, env=envv,
                             capture_output=True, text=True, timeout=60)
    assert "rebuilt" in rebuilt.stdout, rebuilt.stderr
    assert rebuilt.returncode == 0, rebuilt.stdout


def test_metrics_endpoint(metrics_env):
    settings, port, proc = metrics_env
    deadline = time.time() + 60
    body = ""
    while time.time() < deadline:
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            break
        except OSError:
            time.sleep(0.3)
    for name in ("spotreel_scheduler_queue_depth", "spotreel_scheduler_dispatch_seconds",
                 "spotreel_scheduler_lease_expirations", "spotreel_scheduler_rejections",
                 "spotreel_scheduler_consumer_lag"):
        assert name in body, (name, proc.log()[-2000:])
    assert "_created" not in body
    # A first lease is observed as queue wait, labelled by pool and tier (the job's priority).
    proc.wait_owning({0})
    bus = Bus(settings)
    try:
        sub = _job(bus, priority=3)
        bus.wait_event(sub.job_id, ev.JobQueued)
        a = _lease(bus, sub.job_id, "w-metrics")
        pool = bus.state(sub.job_id).pool
        # Jobs by terminal outcome, pool and tenant: one success, one cancel; a late second completion of the
        # same job (rejected) counts nothing more.
        other = _job(bus, model=bus.state(sub.job_id).spec.model)
        bus.wait_event(other.job_id, ev.JobQueued)
        bus.send(c.CancelJob(bus.next_id(), other.job_id, "user"))
        for _ in range(2):
            bus.send(c.CompleteJob(bus.next_id(), sub.job_id, a.epoch, "w-metrics", "out.mp4", "s", 1))
        bus.wait_event(sub.job_id, ev.JobSucceeded)
        bus.wait_event(sub.job_id, ev.CommandRejected)
        bus.wait_event(other.job_id, ev.JobCancelled)
    finally:
        bus.close()
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    assert f'spotreel_scheduler_queue_wait_seconds_count{{pool="{pool}",tier="3"}} 1.0' in body, body[-3000:]
    ended = {o: f'spotreel_scheduler_jobs_ended_total{{outcome="{o}",pool="{pool}",tenant="acme"}}'
             for o in ("succeeded", "cancelled", "failed", "dead_lettered")}
    assert [f"{ended[o]} {n}" in body for o, n in (("succeeded", 1.0), ("cancelled", 1.0), ("failed", 0.0),
                                                    ("dead_lettered", 0.0))] == [True] * 4, body[-3000:]
