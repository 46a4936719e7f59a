"""Two real `spotreel worker` processes of different fingerprints (domain/resume_match.py) against the real
scheduler, gateway, Kafka and S3.

Worker B's fingerprint differs from A's by SPOTREEL_WORKER_FINGERPRINT_OVERRIDE (device=cuda, dtype=float16):
a simulated difference, since this machine has one kind of hardware; its render is the same CPU float32 one.
A checkpoints a job, is stopped until B is up, then preempted (SIGTERM: emergency checkpoint, release). B gets the job and starts at
step 0 instead of loading A's checkpoints (which would have failed its load check and cost an attempt): its
JobLeased names them as skipped, no attempt is spent, and the video equals an uninterrupted render. B is not
held back for A (resume affinity waits only for an idle worker that matches; one that released its lease is
not idle)."""

from __future__ import annotations

import signal
import uuid

import pytest

from spotreel.domain import events as ev
from spotreel.domain import resume_match as rm
from tests.integration.workerkit import (events_of, finished_by, reference_checksum, start_plane, stop_all,
                                         video_frames_checksum)

# serial: two real workers rendering on two xdist workers take it past 60 s.
pytestmark = [pytest.mark.integration, pytest.mark.serial, pytest.mark.timeout(300)]

OVERRIDE = "device=cuda;dtype=float16"


@pytest.fixture(scope="module")
def plane(settings, stack, tmp_path_factory):
    yield from start_plane(settings, stack, tmp_path_factory.mktemp("fingerprint-plane"))


def test_a_worker_of_another_fingerprint_starts_at_step_0_and_spends_no_attempt(plane):
    model = f"tiny-{uuid.uuid4().hex[:8]}"
    a = plane.worker("a", model, "http", "--once", "--checkpoint-every", "0.25", "--lease-ttl-ms", "30000")
    b = None
    try:
        a.wait_ready()
        job = plane.submit(model, num_steps=60)
        plane.bus.wait_event(job.job_id, ev.CheckpointRecorded, timeout=120, count=2)
        # A waits, stopped (its 30 s lease outlasts it), until B is up: then B is idle when A is preempted.
        a.signal(signal.SIGSTOP)
        b = plane.worker("b", model, "http", "--once", "--checkpoint-every", "0.25", "--lease-ttl-ms", "8000",
                         env={"SPOTREEL_WORKER_FINGERPRINT_OVERRIDE": OVERRIDE})
        b.wait_ready()
        a.signal(signal.SIGCONT)
        a.signal(signal.SIGTERM)
        assert a.wait_exit(60) == 0, a.logs()
        plane.bus.wait_event(job.job_id, ev.JobRequeued, timeout=60)
        done = finished_by(plane, job.job_id, b, timeout=180)
    finally:
        stop_all(a, b)
    leased = events_of(plane.bus, job.job_id, ev.JobLeased)
    assert [x.worker_id for x in leased] == [a.worker_id, b.worker_id]
    ours = [e for e in events_of(plane.bus, job.job_id, ev.CheckpointRecorded) if e.epoch == 1]
    fp_a, fp_b = leased[0].worker_fingerprint, leased[1].worker_fingerprint
    assert fp_a and rm.differences(fp_a, fp_b) == ("device", "dtype")
    assert all(e.fingerprint == fp_a for e in ours)
    # B skipped every checkpoint A left (A's emergency one included) and started at step 0.
    kept = {e.checkpoint_key for e in ours} - {k for e in ours for k in e.pruned_keys}
    assert (leased[1].resume_checkpoint_key, leased[1].resume_step, leased[1].resume_reason) == \
        (None, None, "none_compatible")
    assert set(leased[1].resume_skipped_keys) == kept
    theirs = [e for e in events_of(plane.bus, job.job_id, ev.CheckpointRecorded) if e.epoch == 2]
    assert theirs and all(rm.parse(e.fingerprint)["device"] == "cuda" for e in theirs)
    assert not events_of(plane.bus, job.job_id, ev.AttemptFailed)
    state = plane.bus.state(job.job_id)
    assert state.attempts_used == 0 and state.recent_failures_ms == ()
    assert video_frames_checksum(plane, done.artifact_key) == reference_checksum(plane.model_dir, job, "ddim")
