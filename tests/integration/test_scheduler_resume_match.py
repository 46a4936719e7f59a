"""Checkpoints know where they can resume, on the real scheduler (domain/resume_match.py): simulated workers of
two fingerprints (the test's Bus; F1 and F2 differ in device kind and dtype), one partition, resume hold 3 s
(SPOTREEL_DISPATCH_RESUME_HOLD_S).

Worker A (F1) checkpoints a job at steps 5 and 10 and is preempted. With A2 (F1) and B (F2) both idle, B's ask
is answered `held_for_match` and A2's gets the lease, resuming from step 10. A2 is preempted too; C (F1) is
idle but does not ask, B does: after the bounded hold it gets the job from step 0 (`none_compatible`, both
checkpoints named as skipped), records its own checkpoint below them and completes. No attempt is spent on the
way."""

from __future__ import annotations

import time
import uuid

import pytest

from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.domain import ids
from spotreel.domain import resume_match as rm
from tests.integration.schedkit import GPU, MODEL, Bus, SchedulerProc, drop_topics, make_topics, scheduler_settings, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

F1 = rm.encode({"family": "unet3d", "torch": "2.13.0", "diffusers": "0.39.0", "device": "cpu", "dtype": "float32"})
F2 = rm.encode({"family": "unet3d", "torch": "2.13.0", "diffusers": "0.39.0", "device": "cuda", "dtype": "float16"})
HOLD_S = 3


def ask_once(bus: Bus, worker: str, fingerprint: str) -> ev.WorkAssigned | ev.NoWorkAvailable:
    rid = bus.next_id(f"rw-{worker}")
    bus.send(c.RequestWork(rid, worker, GPU, (MODEL,), (), False, 30_000, int(time.time() * 1000), fingerprint),
             partition=0)
    return bus.wait_for(lambda: bus.answers.get(rid), 20, f"answer to {rid}")


def checkpoint(bus: Bus, job_id: str, epoch: int, worker: str, step: int, fingerprint: str) -> str:
    key = ids.checkpoint_key(job_id, epoch, step)
    bus.send(c.RecordCheckpoint(bus.next_id("ck"), job_id, epoch, worker, key, step, step * 5.0, "sum", 100,
                                fingerprint=fingerprint))
    return key


def test_a_matching_worker_is_preferred_and_another_resumes_from_step_0_without_spending_an_attempt(stack, tmp_path):
    settings = scheduler_settings("frm" + uuid.uuid4().hex[:10], partitions=1)
    make_topics(settings)
    bus = Bus(settings)
    proc = SchedulerProc(settings, tmp_path, env={"SPOTREEL_DISPATCH_RESUME_HOLD_S": str(HOLD_S)})
    try:
        proc.wait_owning({0})
        job = submit("acme", uuid.uuid4().hex[:8])
        bus.send(job)
        first = bus.request_work("wa", fingerprint=F1, timeout=30)
        assert isinstance(first, ev.WorkAssigned) and first.resume_checkpoint_key is None
        keys = [checkpoint(bus, job.job_id, 1, "wa", step, F1) for step in (5, 10)]
        recorded = bus.wait_event(job.job_id, ev.CheckpointRecorded, count=2)
        assert recorded.fingerprint == F1

        # Two idle workers, one of each fingerprint, known to the partition.
        assert ask_once(bus, "wa2", F1).reason == "no_queued_job"
        assert ask_once(bus, "wb", F2).reason == "no_queued_job"
        bus.send(c.ReleaseLease(bus.next_id("rel"), job.job_id, 1, "wa", "preempted"))
        bus.wait_event(job.job_id, ev.JobRequeued)
        held = ask_once(bus, "wb", F2)
        assert isinstance(held, ev.NoWorkAvailable) and held.reason == "held_for_match"
        matched = ask_once(bus, "wa2", F1)
        assert isinstance(matched, ev.WorkAssigned) and (matched.resume_checkpoint_key, matched.resume_step) == (keys[1], 10)
        leased = bus.wait_event(job.job_id, ev.JobLeased, count=2)
        assert (leased.worker_fingerprint, leased.resume_reason, leased.resume_skipped_keys) == (F1, "newest", ())

        # An idle F1 worker that never asks again does not keep the job from B for longer than the hold. (A
        # worker that released its lease, like wa and wa2, is not idle: it may be going away.)
        assert ask_once(bus, "wc", F1).reason == "no_queued_job"
        bus.send(c.ReleaseLease(bus.next_id("rel"), job.job_id, 2, "wa2", "preempted"))
        requeued = bus.wait_event(job.job_id, ev.JobRequeued, count=2)
        other = bus.request_work("wb", fingerprint=F2, timeout=30)
        assert isinstance(other, ev.WorkAssigned) and other.resume_checkpoint_key is None and other.resume_step is None
        assert other.at_ms - requeued.at_ms >= HOLD_S * 1000 - 100  # held for the idle F1 workers, then given
        leased = bus.wait_event(job.job_id, ev.JobLeased, count=3)
        assert (leased.resume_reason, leased.resume_skipped_keys) == ("none_compatible", tuple(keys))
        assert "device, dtype" in (leased.resume_detail or "")

        own = checkpoint(bus, job.job_id, 3, "wb", 4, F2)
        mine = bus.wait_event(job.job_id, ev.CheckpointRecorded, count=3)
        assert (mine.checkpoint_key, mine.fingerprint) == (own, F2)
        bus.send(c.CompleteJob(bus.next_id("done"), job.job_id, 3, "wb", ids.artifact_key(job.job_id, 3), "sha", 9))
        bus.wait_event(job.job_id, ev.JobSucceeded)
        state = bus.state(job.job_id)
        assert state.attempts_used == 0 and state.recent_failures_ms == ()
        assert not [e for e in bus.job_events(job.job_id) if isinstance(e, (ev.AttemptFailed, ev.CommandRejected))]
    finally:
        proc.stop()
        bus.close()
        drop_topics(settings)
