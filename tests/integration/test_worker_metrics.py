"""The worker's metrics (worker/metrics.py) from a real lease run: the tiny model renders, checkpoints and the
video go to the real S3; the control plane is scripted to accept every command (its own tests are
elsewhere). One run that succeeds, one whose checkpoint writes fail (skipped: the run still succeeds)."""

from __future__ import annotations

import uuid

import boto3
import pytest
from botocore.config import Config
from prometheus_client import generate_latest

from spotreel.platform.ports import free_port
from spotreel.worker.artifacts import ArtifactStore
from spotreel.worker.checkpoints import CheckpointStore
from spotreel.domain.checkpoint_interval import IntervalPolicy
from spotreel.worker.job import JobRun
from spotreel.worker.metrics import PHASES, WorkerMetrics
from spotreel.worker.render_loop import Renderer
from spotreel.worker.signals import PreemptionNotice
from spotreel.worker.storage import StorageBudgets
from spotreel.domain.spec import RenderSpec
from spotreel.worker.transport import WorkerLease, Verdict

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

POOL = "tiny-t2v@metrics"
STEPS = 4


class AcceptingControlPlane:
    """Every fenced command is accepted at once."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def _ok(self, kind: str) -> Verdict:
        self.sent.append(kind)
        return Verdict(accepted=True)

    def heartbeat(self, lease): return self._ok("heartbeat")  # noqa: E704
    def progress(self, lease, step, pct, phase): return self._ok("progress")  # noqa: E704
    def checkpoint(self, lease, *a, **k): return self._ok("checkpoint")  # noqa: E704
    def complete(self, lease, *a): return self._ok("complete")  # noqa: E704
    def fail(self, lease, *a): return self._ok("fail")  # noqa: E704
    def release(self, lease, reason="preempted"): return self._ok("release")  # noqa: E704


def _lease() -> WorkerLease:
    return WorkerLease(job_id="j" + uuid.uuid4().hex, epoch=1, worker_id="w-metrics", attempt=1, lease_ttl_ms=30_000,
                 lease_expires_at_ms=0, pool=POOL, gpu_type="metrics",
                 spec=RenderSpec(model="tiny-t2v", prompt="a fox", duration_s=0.5, resolution="32x32", fps=8, seed=3,
                                 num_steps=STEPS))


def _run(renderer, s3, bucket: str, metrics: WorkerMetrics, ckpt_s3=None):
    plane = AcceptingControlPlane()
    checkpoints = CheckpointStore(ckpt_s3 or s3, bucket)
    outcome = JobRun(_lease(), plane, renderer, s3, checkpoints, ArtifactStore(s3, bucket),  # type: ignore[arg-type]
                     IntervalPolicy.fixed(1e-6), PreemptionNotice(20.0), metrics=metrics,
                     budgets=StorageBudgets(checkpoint_s=0.5)).run()
    return outcome, plane


def _value(text: str, line_start: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {line_start} in\n{text}")


def test_a_run_fills_step_checkpoint_phase_and_outcome_metrics(tiny_model_dir, s3, bucket) -> None:
    renderer = Renderer(tiny_model_dir)
    metrics = WorkerMetrics()
    outcome, plane = _run(renderer, s3, bucket, metrics)
    assert outcome.kind == "succeeded", outcome
    text = generate_latest(metrics.registry).decode()
    p = f'pool="{POOL}"'
    assert _value(text, f"spotreel_worker_step_seconds_count{{{p}}}") == STEPS
    written = plane.sent.count("checkpoint")
    assert written >= 1
    assert _value(text, f"spotreel_worker_checkpoint_seconds_count{{{p}}}") == written
    assert _value(text, f"spotreel_worker_checkpoint_bytes_sum{{{p}}}") > 10_000  # tens of KB each
    for phase in PHASES:
        assert _value(text, f'spotreel_worker_phase_seconds_count{{phase="{phase}",{p}}}') == 1, phase
    assert _value(text, f'spotreel_worker_jobs_total{{outcome="succeeded",{p}}}') == 1
    assert _value(text, "spotreel_worker_busy ") == 0
    assert _value(text, f"spotreel_worker_checkpoint_failures_total{{{p}}}") == 0  # there from the first lease

    # Checkpoints to an S3 endpoint nothing listens on: each write fails within its budget and is skipped,
    # nothing is recorded, and the render goes on to its video.
    unreachable = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{free_port()}", aws_access_key_id="x",
                               aws_secret_access_key="y", region_name="us-east-1",
                               config=Config(connect_timeout=1, read_timeout=1, retries={"max_attempts": 1}))
    broken = WorkerMetrics()
    outcome, plane = _run(renderer, s3, bucket, broken, ckpt_s3=unreachable)
    assert outcome.kind == "succeeded" and "checkpoint" not in plane.sent and "fail" not in plane.sent
    text = generate_latest(broken.registry).decode()
    assert _value(text, f"spotreel_worker_checkpoint_failures_total{{{p}}}") == written
    assert _value(text, f'spotreel_worker_jobs_total{{outcome="succeeded",{p}}}') == 1
