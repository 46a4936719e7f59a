"""The S3 store lost in the middle of real renders, the two ways a store is lost: stopped (SIGSTOP for 20 s:
connections are accepted and never answered, only the read timeout notices) and killed (kill -9, then started
again on the same data). Every video completes, no job is dead-lettered or even fails an attempt, and the
frames are bit-identical to an uninterrupted render of the same seed (workerkit.reference_checksum).

What the workers do meanwhile (worker/storage.py, worker/job.py): a checkpoint the store does not take within
--checkpoint-budget is skipped and the render goes on; the video's upload and a resume checkpoint's read are
retried within --storage-budget (default 120 s) until the store answers again. In the kill -9 case one
worker is killed together with the store, so its successor's resume read meets the dead store too.

The store is a private SeaweedFS (tests/harness/private_seaweed.py, the devstack's launcher on its own ports
and data), so the shared stack's S3 is not disturbed; the plane's gateway and workers are pointed at it (the
scheduler touches no object). Kafka and Cassandra are the shared ones.
"""

from __future__ import annotations

import signal
import time
import uuid
from dataclasses import replace

import pytest

from spotreel.domain import events as ev
from tests.harness.private_seaweed import start_private_seaweed
from tests.integration.workerkit import events_of, reference_checksum, start_plane, video_frames_checksum, wait_done

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(300)]

OUTAGE_S = 20.0
# Short enough that a checkpoint tried while the store is stopped is given up (and the render goes on)
# within the outage; the upload and resume reads keep the default storage budget.
CHECKPOINT_BUDGET_S = "2"
# Twice workerkit's steps, so both renders are still denoising when the store goes (about 0.1 s a step).
STEPS = 48


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    yield from start_private_seaweed(tmp_path_factory.mktemp("store") / "home")


@pytest.fixture(scope="module")
def plane(settings, stack, store, tmp_path_factory):
    yield from start_plane(settings, replace(stack, s3_endpoint=store.endpoint),
                           tmp_path_factory.mktemp("storage-chaos"), env=store.env)


def _workers(plane, model: str, names: tuple[str, ...], transports: tuple[str, ...]):
    common = ("--once", "--sampler", "ddim", "--checkpoint-every", "0.3", "--lease-ttl-ms", "5000",
              "--checkpoint-budget", CHECKPOINT_BUDGET_S)
    return [plane.worker(n, model, t, *common) for n, t in zip(names, transports)]


def _leased_by(plane, workers, jobs) -> dict[str, object]:
    """job id -> the worker that leased it."""
    owner = {}
    for job in jobs:
        first = plane.bus.wait_event(job.job_id, ev.JobLeased, timeout=90)
        owner[job.job_id] = next(w for w in workers if w.worker_id == first.worker_id)
    return owner


def _at_step(worker, job_id: str, step: int) -> None:
    worker.wait_line(lambda l: l.get("event") == "step" and l.get("job_id") == job_id and l["step"] >= step,
                     what=f"step {step}")


def _assert_all_done_as_uninterrupted(plane, jobs, done) -> None:
    for job in jobs:
        history = plane.bus.job_events(job.job_id)
        bad = [e for e in history if isinstance(e, (ev.AttemptFailed, ev.JobFailed, ev.JobDeadLettered))]
        assert not bad, bad
        assert len([e for e in history if isinstance(e, ev.JobSucceeded)]) == 1
        assert video_frames_checksum(plane, done[job.job_id].artifact_key) == \
            reference_checksum(plane.model_dir, job, "ddim")


def _skipped(worker) -> int:
    return worker.err.read_text(errors="replace").count(" skipped (")


def test_a_store_stopped_for_20_s_mid_render_costs_time_not_videos(plane, store):
    model = f"tiny-{uuid.uuid4().hex[:8]}"
    workers = _workers(plane, model, ("a", "b"), ("http", "kafka"))
    try:
        for w in workers:
            w.wait_ready()
        jobs = [plane.submit(model, "stop", seed=seed, num_steps=STEPS) for seed in (11, 12)]
        owner = _leased_by(plane, workers, jobs)
        for job in jobs:
            _at_step(owner[job.job_id], job.job_id, 5)
            plane.bus.wait_event(job.job_id, ev.CheckpointRecorded, timeout=60)
        store.pause()
        try:
            time.sleep(OUTAGE_S)
        finally:
            store.resume()
        back_ms = time.time() * 1000
        done = {job.job_id: wait_done(plane.bus, job.job_id, timeout=150) for job in jobs}
        for w in workers:
            assert w.wait_exit(60) == 0, w.logs()
    finally:
        store.resume()
        for w in workers:
            w.stop()
    _assert_all_done_as_uninterrupted(plane, jobs, done)
    # The outage was inside the renders: at least one checkpoint met the stopped store and was skipped, and
    # no video was completed before the store came back.
    assert sum(_skipped(w) for w in workers) >= 1, [w.logs() for w in workers]
    assert all(d.at_ms >= back_ms - 1000 for d in done.values()), (back_ms, done)
    assert [o["outcome"] for w in workers for o in w.outcomes()] == ["succeeded", "succeeded"]


def test_a_store_killed_and_restarted_mid_render_costs_time_not_videos(plane, store, monkeypatch):
    """kill -9 of the store and, at the same moment, of job 1's worker: job 2's render meets the dead store
    in its checkpoints and upload, job 1's successor (worker c, once the lease expired) in its resume read.
    The test-only hang hook holds job 1's first worker at step 8 (until it is killed) and job 2's at step 6
    for 4 s, so both are mid-render when the store goes; the jobs are of two models (pools), and c, started
    once a holds job 1, can only take job 1."""
    from spotreel.worker.render_loop import TEST_HANG_ENV

    tag = uuid.uuid4().hex[:8]
    one, two = f"tiny-{tag}-1", f"tiny-{tag}-2"
    started = []
    try:
        with monkeypatch.context() as m:
            m.setenv(TEST_HANG_ENV, "8")
            a, = _workers(plane, one, ("a",), ("kafka",))
            started.append(a)
            m.setenv(TEST_HANG_ENV, "6:4")
            b, = _workers(plane, two, ("b",), ("http",))
            started.append(b)
        for w in started:
            w.wait_ready()
        first = plane.submit(one, "kill", seed=21, num_steps=STEPS)
        _at_step(a, first.job_id, 8)
        c, = _workers(plane, one, ("c",), ("http",))
        started.append(c)
        c.wait_ready()
        plane.bus.wait_event(first.job_id, ev.CheckpointRecorded, timeout=60)
        second = plane.submit(two, "kill", seed=22, num_steps=STEPS)
        _at_step(b, second.job_id, 6)
        store.kill9()
        a.signal(signal.SIGKILL)
        time.sleep(8.0)  # past job 1's lease (5 s): worker c takes it and reads its checkpoint from no store
        store.start()
        jobs = (first, second)
        done = {job.job_id: wait_done(plane.bus, job.job_id, timeout=150) for job in jobs}
        assert b.wait_exit(60) == 0, b.logs()
        assert c.wait_exit(60) == 0, c.logs()
    finally:
        for w in started:
            w.stop()
    _assert_all_done_as_uninterrupted(plane, jobs, done)
    leases = events_of(plane.bus, first.job_id, ev.JobLeased)
    assert [le.worker_id for le in leases] == [a.worker_id, c.worker_id]
    assert leases[1].resume_checkpoint_key and 1 <= leases[1].resume_step <= 8 and done[first.job_id].epoch == 2
    # c waited for the store: its resume read was retried until the restart. b's render went on past the
    # checkpoints the dead store refused.
    assert "read of checkpoint" in c.err.read_text(errors="replace"), c.logs()
    assert _skipped(b) >= 1, b.logs()
    assert [o["outcome"] for w in (b, c) for o in w.outcomes()] == ["succeeded", "succeeded"]
