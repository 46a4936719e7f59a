"""A worker whose denoising step hangs, against the real scheduler, gateway, Kafka, Cassandra and S3.

The hang is injected with the pipeline's test-only hook (SPOTREEL_TEST_HANG_STEP, worker/render_loop.py). Two
ways out, both ending the lease as a retryable `stuck` attempt and the job finishing on a later lease:
- the worker's own watchdog reports it (FailJob) and, its step still hung, exits with status 75;
- with the watchdog off, the worker keeps heartbeating while the step hangs, and the scheduler's stuck timer
  (domain/limits.py) fences the lease; the step returns later, the worker finds its lease gone, and it
  renders the job again on its next lease.
Also here, sharing the plane: a job past its timeout fails for good, and a request the model cannot render
(submitted over Kafka, past the gateway's checks) fails on its first attempt instead of being retried.
"""

from __future__ import annotations

import uuid

import pytest

from spotreel.domain import events as ev
from spotreel.worker.render_loop import TEST_HANG_ENV
from spotreel.worker.stuck import STUCK_EXIT
from tests.integration.schedkit import submit as submit_command
from tests.integration.workerkit import DURATION_S, FPS, GPU, STEPS, events_of, start_plane, wait_done

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FAST_RETRY = {"backoff_base_ms": 300, "backoff_max_ms": 600}


@pytest.fixture(scope="module")
def plane(settings, stack, tmp_path_factory):
    yield from start_plane(settings, stack, tmp_path_factory.mktemp("stuck-plane"))


def model_name() -> str:
    return f"tiny-{uuid.uuid4().hex[:8]}"


def hung_worker(plane, monkeypatch, name: str, model: str, hang: str, *extra: str):
    with monkeypatch.context() as m:
        m.setenv(TEST_HANG_ENV, hang)
        return plane.worker(name, model, "http", "--lease-ttl-ms", "6000", *extra)


def test_the_worker_reports_its_hung_step_and_exits_and_another_worker_finishes(plane, monkeypatch):
    model = model_name()
    a = hung_worker(plane, monkeypatch, "hung", model, "3", "--stuck-steps", "5", "--stuck-min-seconds", "2")
    b = None
    try:
        a.wait_ready()
        job = plane.submit(model, **FAST_RETRY)  # the job's own rule keeps its default 120 s floor
        failed = plane.bus.wait_event(job.job_id, ev.AttemptFailed, timeout=120)
        assert (failed.error_code, failed.retryable, failed.worker_id) == ("stuck", True, a.worker_id)
        assert "after step 3" in failed.error_message
        assert not failed.causation_id.startswith("timer:")  # the worker's own report
        assert a.wait_exit(60) == STUCK_EXIT, a.logs()
        assert [o["outcome"] for o in a.outcomes()] == ["stuck"]
        b = plane.worker("healthy", model, "http", "--once", "--lease-ttl-ms", "6000")
        wait_done(plane.bus, job.job_id)
        assert b.wait_exit(60) == 0, b.logs()
    finally:
        a.stop()
        if b is not None:
            b.stop()
    assert not events_of(plane.bus, job.job_id, ev.LeaseExpired)
    assert [s.reason for s in events_of(plane.bus, job.job_id, ev.JobScheduled)] == ["backoff"]


def test_the_scheduler_fences_a_lease_whose_step_stopped_while_its_worker_heartbeats(plane, monkeypatch):
    model = model_name()
    w = hung_worker(plane, monkeypatch, "deaf", model, "3:15", "--stuck-steps", "0", "--max-jobs", "2")
    try:
        w.wait_ready()
        job = plane.submit(model, stuck_steps=5, stuck_min_ms=3_000, **FAST_RETRY)
        failed = plane.bus.wait_event(job.job_id, ev.AttemptFailed, timeout=120)
        assert (failed.error_code, failed.retryable, failed.epoch) == ("stuck", True, 1)
        assert failed.causation_id.startswith(f"timer:stuck:{job.job_id}:e1@")
        # The lease was alive (heartbeats), not expired: the stuck rule ended it.
        assert not events_of(plane.bus, job.job_id, ev.LeaseExpired)
        # The step returns, the worker finds its lease gone, asks again and renders the job on lease 2.
        done = wait_done(plane.bus, job.job_id, timeout=150)
        assert done.epoch == 2
        assert w.wait_exit(60) == 0, w.logs()  # --max-jobs 2
        assert [o["outcome"] for o in w.outcomes()] == ["stale", "succeeded"], w.logs()
    finally:
        w.stop()


def test_a_job_past_its_timeout_fails_for_good_and_its_worker_is_fenced(plane, monkeypatch):
    model = model_name()
    w = hung_worker(plane, monkeypatch, "slow", model, "3", "--stuck-steps", "0")
    try:
        w.wait_ready()
        job = plane.submit(model, timeout_ms=4_000, stuck_steps=0, **FAST_RETRY)
        final = plane.bus.wait_event(job.job_id, ev.JobFailed, timeout=120)
        assert (final.reason, final.error_code) == ("timeout", "timeout")
        failed = events_of(plane.bus, job.job_id, ev.AttemptFailed)
        assert [(f.error_code, f.retryable, f.epoch) for f in failed] == [("timeout", False, 1)]
        assert failed[0].causation_id.startswith(f"timer:timeout:{job.job_id}:e1@")
        leased = events_of(plane.bus, job.job_id, ev.JobLeased)[0]
        assert failed[0].at_ms - leased.at_ms >= 4_000
        # The worker's next renewal is refused: the job is over.
        refused = plane.bus.wait_for(lambda: [r for r in events_of(plane.bus, job.job_id, ev.CommandRejected)
                                              if r.reason == "terminal"] or None, 30, "a refused renewal")
        assert refused[0].epoch_given == 1
    finally:
        w.stop()


def test_a_request_the_model_cannot_render_fails_at_once_not_once_per_attempt(plane):
    model = model_name()
    w = plane.worker("strict", model, "http", "--once", "--lease-ttl-ms", "6000")
    try:
        w.wait_ready()
        # The tiny model renders multiples of 4 only; the gateway would refuse 30x30 (multiples of 8).
        job = submit_command("acme", f"{model}-bad", model=model, gpu_type=GPU, resolution="30x30",
                             duration_s=DURATION_S, fps=FPS, num_steps=STEPS, max_attempts=3, **FAST_RETRY)
        plane.bus.send(job)
        final = plane.bus.wait_event(job.job_id, ev.JobFailed, timeout=120)
        assert final.reason == "non_retryable" and final.error_code == "invalid_request"
        failed = events_of(plane.bus, job.job_id, ev.AttemptFailed)
        assert [(f.error_code, f.retryable, f.attempts_used) for f in failed] == [("invalid_request", False, 1)]
        assert "multiples of 4" in failed[0].error_message
        assert w.wait_exit(60) == 0, w.logs()
    finally:
        w.stop()
