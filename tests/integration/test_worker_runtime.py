"""`spotreel worker` processes against the real scheduler, gateway, Kafka, Cassandra and S3.

Both transports (HTTP through the gateway, Kafka directly) run the same tests. A finished video is
judged on its uint8 frames (the checksum stored in the object's metadata) against an uninterrupted
render of the same request and seed in this process.
"""

from __future__ import annotations

import uuid

import pytest

from spotreel.domain import events as ev
from spotreel.domain.evolve import fold
from tests.integration.workerkit import (artifact_keys, events_of, finished_by, reference_checksum, start_plane,
                                         stop_all, video_frames_checksum, wait_done)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TRANSPORTS = ["http", "kafka"]


@pytest.fixture(scope="module")
def plane(settings, stack, tmp_path_factory):
    yield from start_plane(settings, stack, tmp_path_factory.mktemp("worker-plane"))


def model_name() -> str:
    return f"tiny-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_worker_renders_a_job_end_to_end(plane, transport):
    model = model_name()
    w = plane.worker("solo", model, transport, "--once", "--checkpoint-every", "0.5", "--lease-ttl-ms", "8000")
    try:
        w.wait_ready()
        # Denoising lasts about 4 s: longer than the quiet time a pacing hint may impose on this lease (a third
        # of its 8 s TTL), so the pulse reports progress whatever the control plane's speed.
        job = plane.submit(model, num_steps=80)
        done = finished_by(plane, job.job_id, w)
    finally:
        w.stop()
    leased = events_of(plane.bus, job.job_id, ev.JobLeased)
    assert len(leased) == 1 and leased[0].worker_id == w.worker_id
    # The artifact key names the job and the lease epoch; the only object is the referenced one.
    assert done.artifact_key == f"videos/{job.job_id}/e{done.epoch:08d}/video.mp4"
    assert artifact_keys(plane, job.job_id) == [done.artifact_key]
    head = plane.s3.head_object(Bucket=plane.settings.s3_bucket_artifacts, Key=done.artifact_key)
    assert head["ContentLength"] == done.artifact_size_bytes and head["Metadata"]["content-sha256"] == done.artifact_checksum
    assert video_frames_checksum(plane, done.artifact_key) == reference_checksum(plane.model_dir, job, "ddim")
    # Progress was reported on the pulse's own clock and ended in the finishing phases.
    phases = [e.phase for e in events_of(plane.bus, job.job_id, ev.ProgressReported)]
    assert phases and "denoising" in phases
    # After success the job's checkpoints are deleted.
    left = plane.s3.list_objects_v2(Bucket=plane.settings.s3_bucket_checkpoints, Prefix=f"ckpt/{job.job_id}/")
    assert left.get("KeyCount", 0) == 0
    assert [o["outcome"] for o in w.outcomes()] == ["succeeded"]


def test_corrupted_newest_checkpoint_resumes_from_the_previous_one(plane):
    model = model_name()
    a = plane.worker("a", model, "http", "--once", "--checkpoint-every", "0.25", "--lease-ttl-ms", "5000")
    b = None
    try:
        a.wait_ready()
        job = plane.submit(model, backoff_base_ms=300, backoff_max_ms=600)
        plane.bus.wait_event(job.job_id, ev.CheckpointRecorded, timeout=120, count=2)
        a.signal(9)
        a.wait_exit(30)
        plane.bus.wait_event(job.job_id, ev.LeaseExpired, timeout=60)
        kept = fold(plane.bus.job_events(job.job_id)).checkpoints
        assert len(kept) >= 2, kept
        newest, previous = kept[-1], kept[-2]
        # Flip one byte in the middle of the newest checkpoint object.
        bucket = plane.settings.s3_bucket_checkpoints
        data = bytearray(plane.s3.get_object(Bucket=bucket, Key=newest.key)["Body"].read())
        data[len(data) // 2] ^= 0xFF
        plane.s3.put_object(Bucket=bucket, Key=newest.key, Body=bytes(data))

        b = plane.worker("b", model, "kafka", "--max-jobs", "2", "--checkpoint-every", "0.25",
                         "--lease-ttl-ms", "5000")
        done = finished_by(plane, job.job_id, b)
    finally:
        stop_all(a, b)
    # Recorded in the job's history: the failed attempt names the bad checkpoint ...
    failed = events_of(plane.bus, job.job_id, ev.AttemptFailed)
    assert [f.invalid_checkpoint_key for f in failed] == [newest.key], failed
    assert failed[0].error_code == "invalid_checkpoint"
    # ... and the next lease resumes from the one before it.
    leases = events_of(plane.bus, job.job_id, ev.JobLeased)
    assert [le.resume_checkpoint_key for le in leases[1:]] == [newest.key, previous.key]
    assert [o["outcome"] for o in b.outcomes()] == ["invalid_checkpoint", "succeeded"]
    assert video_frames_checksum(plane, done.artifact_key) == reference_checksum(plane.model_dir, job, "ddim")


def test_two_jobs_that_differ_only_in_guidance_render_different_frames_each_as_asked(plane):
    """The job's own guidance and negative prompt reach the render through the lease (the HTTP answer of the
    real gateway here; the Kafka one in the chaos test): one worker renders the same prompt and seed without
    and with guidance, and each video equals the uninterrupted reference render of its own settings."""
    model = model_name()
    w = plane.worker("g", model, "http", "--max-jobs", "2", "--checkpoint-every", "60")
    try:
        w.wait_ready()
        plain = plane.submit(model, "plain", num_steps=8)
        guided = plane.submit(model, "guided", num_steps=8, guidance_scale=6.0, negative_prompt="blurry, dark")
        done = {job.job_id: wait_done(plane.bus, job.job_id) for job in (plain, guided)}
        assert w.wait_exit(60) == 0, w.logs()
    finally:
        w.stop()
    frames = {job.job_id: video_frames_checksum(plane, done[job.job_id].artifact_key) for job in (plain, guided)}
    assert frames[plain.job_id] != frames[guided.job_id]
    assert frames[plain.job_id] == reference_checksum(plane.model_dir, plain, "ddim")
    assert frames[guided.job_id] == reference_checksum(plane.model_dir, guided, "ddim")
