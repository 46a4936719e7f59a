"""Workers lost in every way a spot worker can be lost, with real processes and signals:

- kill -9 at a random step: the lease expires, another worker resumes from the last recorded checkpoint,
  and the video's frames are bit-identical to an uninterrupted run (DDIM as the workers' sampler; Euler
  ancestral with guidance and a negative prompt as the job's own render options, on its lease); the same
  kill for the Wan, LTX-Video and CogVideoX families (held at a step by the test-only hang hook);
- SIGTERM: emergency checkpoint and release; the job is requeued at once, long before the lease TTL;
- SIGSTOP past the lease, then SIGCONT: the paused worker's commands are refused as stale, it deletes what
  it wrote under its dead epoch and exits; the referenced video is the other worker's.

The lost worker and its successor use different transports (HTTP through the gateway, Kafka directly),
each transport in both roles across the tests, so the two also show they interoperate on one job. The
step to strike at is drawn at random and printed.
"""

from __future__ import annotations

import random
import signal
import time
import uuid

import pytest

from spotreel.domain import events as ev
from tests.integration.workerkit import (STEPS, artifact_keys, events_of, finished_by, reference_checksum, start_plane,
                                         stop_all, video_frames_checksum, wait_done)

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(300)]



@pytest.fixture(scope="module")
def plane(settings, stack, tmp_path_factory):
    yield from start_plane(settings, stack, tmp_path_factory.mktemp("worker-chaos"))


def strike_step() -> int:
    step = random.Random().randint(4, STEPS - 8)
    print(f"striking at step {step}")
    return step


def at_step(worker, job_id: str, step: int) -> dict:
    return worker.wait_line(lambda l: l.get("event") == "step" and l.get("job_id") == job_id and l["step"] >= step,
                            what=f"step {step}")


def last_step(worker) -> int:
    return max(l["step"] for l in worker.lines() if l.get("event") == "step")


def start_pair(plane, sampler: str, transports: tuple[str, str], ttl_ms: int, *a_extra: str,
               options: dict | None = None):
    """Worker A takes the job; B is started once A holds the lease, so it is warm and long-polling when
    the job comes back. `options`: the job's own render options (then the workers get no --sampler)."""
    model = f"tiny-{uuid.uuid4().hex[:8]}"
    common = ("--once", *(() if options else ("--sampler", sampler)), "--checkpoint-every", "0.3",
              "--lease-ttl-ms", str(ttl_ms))
    a = plane.worker("a", model, transports[0], *common, *a_extra)
    a.wait_ready()
    job = plane.submit(model, sampler, **(options or {}))
    a.wait_line(lambda l: l.get("event") == "leased" and l["job_id"] == job.job_id, what="lease")
    b = plane.worker("b", model, transports[1], *common)
    return a, b, job


# The second case's sampler (not the family's default), guidance and negative prompt are the job's: they reach
# both workers on the lease (over Kafka, then HTTP) and into the checkpoint's fingerprint.
JOB_OPTIONS = {"sampler": "euler_a", "guidance_scale": 3.0, "negative_prompt": "blurry, dark"}


@pytest.mark.parametrize("sampler, transports, options", [("ddim", ("http", "kafka"), None),
                                                          ("euler_a", ("kafka", "http"), JOB_OPTIONS)])
def test_kill9_at_a_random_step_then_another_worker_resumes_bit_identical(plane, sampler, transports, options):
    a, b, job = start_pair(plane, sampler, transports, 5000, options=options)
    try:
        at_step(a, job.job_id, strike_step())
        plane.bus.wait_event(job.job_id, ev.CheckpointRecorded, timeout=60)
        a.signal(signal.SIGKILL)
        a.wait_exit(30)
        killed_at = last_step(a)
        done = finished_by(plane, job.job_id, b)
    finally:
        a.stop()
        b.stop()
    expired = events_of(plane.bus, job.job_id, ev.LeaseExpired)
    leases = events_of(plane.bus, job.job_id, ev.JobLeased)
    assert [e.epoch for e in expired] == [1] and [le.worker_id for le in leases] == [a.worker_id, b.worker_id]
    resumed = leases[1]
    assert resumed.resume_checkpoint_key and 0 < resumed.resume_step <= killed_at < STEPS
    assert done.epoch == 2 and done.artifact_key.endswith("/e00000002/video.mp4")
    assert video_frames_checksum(plane, done.artifact_key) == reference_checksum(plane.model_dir, job, sampler)


@pytest.mark.parametrize("family", ["wan", "ltx", "cogvideox"])
def test_kill9_of_a_diffusion_transformer_family_resumes_bit_identical(plane, settings, monkeypatch, family):
    """The same kill -9 for the Wan, LTX-Video and CogVideoX families with their default samplers (UniPC on
    flow sigmas, flow-matching Euler, CogVideoX DDIM). Their tiny builds step in milliseconds, so worker A
    checkpoints every step and is held at step 8 by the test-only hang hook, where it is killed. B is started
    with `--model NAME` from a model registry file, as an operator would."""
    from spotreel.worker.model_tiny import ensure_tiny_model
    from spotreel.worker.render_loop import TEST_HANG_ENV

    model_dir = ensure_tiny_model(settings.cache_dir, family=family)
    model = f"{family}-{uuid.uuid4().hex[:8]}"
    common = ("--once", "--model-dir", str(model_dir), "--checkpoint-every", "0.001", "--lease-ttl-ms", "5000")
    with monkeypatch.context() as m:
        m.setenv(TEST_HANG_ENV, "8")
        a = plane.worker("a", model, "kafka", *common)
    b = None
    try:
        a.wait_ready()
        job = plane.submit(model, family, resolution="16x16", duration_s=0.625)  # 5 frames: 4n+1
        at_step(a, job.job_id, 8)
        plane.bus.wait_event(job.job_id, ev.CheckpointRecorded, timeout=60)
        # B is started the operator's way: by its registry name (directory and sampler from the registry).
        registry = plane.tmp / f"{model}.toml"
        registry.write_text(f'[models.{model}]\ndirectory = "{model_dir}"\nfamily = "{family}"\n'
                            f'sizes = ["16x16"]\nframes = {{ max = 9 }}\nsteps = {{ max = 50 }}\npool = "cpu"\n')
        with monkeypatch.context() as m:
            m.setenv("SPOTREEL_MODEL_REGISTRY", str(registry))
            b = plane.worker("b", model, "http", "--once", "--model", model, "--checkpoint-every", "0.001",
                             "--lease-ttl-ms", "5000")
        a.signal(signal.SIGKILL)
        a.wait_exit(30)
        done = finished_by(plane, job.job_id, b)
    finally:
        stop_all(a, b)
    leases = events_of(plane.bus, job.job_id, ev.JobLeased)
    assert [le.worker_id for le in leases] == [a.worker_id, b.worker_id]
    assert leases[1].resume_checkpoint_key and 0 < leases[1].resume_step <= 8
    assert done.epoch == 2
    sampler = {"wan": "unipc", "ltx": "flow_euler", "cogvideox": "ddim"}[family]
    assert video_frames_checksum(plane, done.artifact_key) == reference_checksum(model_dir, job, sampler)


def test_sigterm_checkpoints_and_releases_so_the_job_is_requeued_at_once(plane):
    ttl_ms = 60_000  # far longer than the test allows for the hand-over: only a release explains it
    a, b, job = start_pair(plane, "ddim", ("http", "kafka"), ttl_ms, "--grace", "15")
    try:
        at_step(a, job.job_id, strike_step())
        sent_ms = time.time() * 1000
        a.signal(signal.SIGTERM)
        assert a.wait_exit(30) == 0, a.logs()
        requeued = plane.bus.wait_event(job.job_id, ev.JobRequeued, timeout=30)
        done = finished_by(plane, job.job_id, b)
    finally:
        a.stop()
        b.stop()
    released = events_of(plane.bus, job.job_id, ev.LeaseReleased)
    assert [(r.epoch, r.reason) for r in released] == [(1, "preempted")] and requeued.reason == "released"
    assert requeued.at_ms - sent_ms < 15_000 < ttl_ms, (requeued.at_ms - sent_ms)
    assert not events_of(plane.bus, job.job_id, ev.LeaseExpired)
    # The emergency checkpoint holds the step A stopped at; B resumes exactly there.
    stopped = [o for o in a.outcomes() if o["job_id"] == job.job_id]
    assert [o["outcome"] for o in stopped] == ["preempted"]
    last_step_a = last_step(a)
    ckpts_a = [c for c in events_of(plane.bus, job.job_id, ev.CheckpointRecorded) if c.epoch == 1]
    assert ckpts_a[-1].step == last_step_a
    resumed = events_of(plane.bus, job.job_id, ev.JobLeased)[1]
    assert resumed.worker_id == b.worker_id and resumed.resume_step == last_step_a
    assert video_frames_checksum(plane, done.artifact_key) == reference_checksum(plane.model_dir, job, "ddim")


def test_a_paused_worker_past_its_lease_writes_nothing_referenced_and_exits(plane):
    a, b, job = start_pair(plane, "ddim", ("kafka", "http"), 4000)
    try:
        at_step(a, job.job_id, strike_step())
        plane.bus.wait_event(job.job_id, ev.CheckpointRecorded, timeout=60)
        a.signal(signal.SIGSTOP)
        done = finished_by(plane, job.job_id, b)
        a.signal(signal.SIGCONT)
        assert a.wait_exit(90) == 0, a.logs()
    finally:
        a.stop()
        b.stop()
    assert done.epoch == 2 and [o["outcome"] for o in a.outcomes()] == ["stale"]
    # A learned it was stale from a refusal, which the scheduler recorded in the job's history.
    refused = plane.bus.wait_for(lambda: [e for e in plane.bus.job_events(job.job_id)
                                          if isinstance(e, ev.CommandRejected) and e.epoch_given == 1],
                                 timeout=30, what="A's refused command")
    assert {r.reason for r in refused} <= {"stale_epoch", "lease_expired", "terminal"}, refused
    history = plane.bus.job_events(job.job_id)
    expiry = next(i for i, e in enumerate(history) if isinstance(e, ev.LeaseExpired) and e.epoch == 1)
    # Nothing A sent after its lease died was applied.
    assert not [e for e in history[expiry + 1:] if getattr(e, "epoch", None) == 1]
    # The only video is B's, and nothing A wrote under epoch 1 survives (its stale uploads were deleted,
    # its referenced checkpoints were pruned after B's success).
    assert artifact_keys(plane, job.job_id) == [done.artifact_key]
    left = plane.s3.list_objects_v2(Bucket=plane.settings.s3_bucket_checkpoints, Prefix=f"ckpt/{job.job_id}/")
    assert left.get("KeyCount", 0) == 0, left.get("Contents")
    assert video_frames_checksum(plane, done.artifact_key) == reference_checksum(plane.model_dir, job, "ddim")


def test_a_worker_of_two_registry_models_switches_when_only_the_other_has_work(plane, settings, monkeypatch):
    """`--model A --model B`: A is loaded and declared warm; a job of B (and none of A) makes the worker
    switch to B while holding the lease, render it, and declare B warm; a job of A then switches it back.
    Both videos equal the uninterrupted reference renders."""
    from spotreel.worker.model_tiny import ensure_tiny_model

    dirs = {f: ensure_tiny_model(settings.cache_dir, family=f) for f in ("wan", "ltx")}
    tag = uuid.uuid4().hex[:8]
    names = {f: f"{f}-{tag}" for f in dirs}
    registry = plane.tmp / f"switch-{tag}.toml"
    registry.write_text("".join(
        f'[models.{names[f]}]\ndirectory = "{d}"\nfamily = "{f}"\nsizes = ["16x16", "32x32"]\n'
        f'frames = {{ max = 9 }}\nsteps = {{ max = 50 }}\npool = "cpu"\n' for f, d in dirs.items()))
    with monkeypatch.context() as m:
        m.setenv("SPOTREEL_MODEL_REGISTRY", str(registry))
        w = plane.worker("sw", names["wan"], "http", "--max-jobs", "2", "--model", names["wan"],
                         "--model", names["ltx"], "--pool", f"{names['ltx']}@cpu")
    try:
        w.wait_ready()
        first = plane.submit(names["ltx"], "switch", resolution="32x32", duration_s=0.625)  # 5 frames
        done_ltx = wait_done(plane.bus, first.job_id)
        second = plane.submit(names["wan"], "switch", resolution="16x16", duration_s=0.625)
        done_wan = wait_done(plane.bus, second.job_id)
        assert w.wait_exit(60) == 0, w.logs()
    finally:
        w.stop()
    switched = [line["model"] for line in w.lines() if line.get("event") == "switched"]
    assert switched == [names["ltx"], names["wan"]], w.logs()
    assert video_frames_checksum(plane, done_ltx.artifact_key) == reference_checksum(dirs["ltx"], first, "flow_euler")
    assert video_frames_checksum(plane, done_wan.artifact_key) == reference_checksum(dirs["wan"], second, "unipc")
