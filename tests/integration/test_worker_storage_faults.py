"""Storage faults are latency, not failure (worker/storage.py, worker/job.py), against real stores: the shared
SeaweedFS for what works, a port nothing listens on for a store that is gone, and a private SeaweedFS
(tests/harness/private_seaweed.py) stopped with SIGSTOP for a store that accepts connections and never
answers. The clients are the project's own (spotreel.platform.s3: botocore's standard retry mode, short
timeouts); the control plane is scripted to accept every command (its own tests are elsewhere). The whole
system under a store outage: tests/chaos/test_storage_faults.py."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import replace

import pytest
from prometheus_client import generate_latest

from spotreel.domain.checkpoint_interval import IntervalPolicy
from spotreel.platform.ports import free_port
from spotreel.domain.spec import RenderSpec
from spotreel.platform.s3 import s3_client
from spotreel.worker.artifacts import ArtifactStore
from spotreel.worker.checkpoints import CheckpointStore
from spotreel.worker.job import JobRun
from spotreel.worker.metrics import WorkerMetrics
from spotreel.worker.render_loop import Renderer
from spotreel.worker.signals import PreemptionNotice
from spotreel.worker.storage import Budget, StorageBudgets, StorageUnavailable, call_within
from spotreel.worker.transport import Verdict, WorkerLease
from tests.harness.private_seaweed import start_private_seaweed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

POOL = "tiny-t2v@storage"
STEPS = 4


class AcceptingControlPlane:
    """Every fenced command is accepted at once; what was sent is kept."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, tuple]] = []

    def _ok(self, kind: str, *args) -> Verdict:
        self.sent.append((kind, args))
        return Verdict(accepted=True)

    def kinds(self) -> list[str]:
        return [k for k, _ in self.sent if k not in ("heartbeat", "progress")]

    def heartbeat(self, lease): return self._ok("heartbeat")  # noqa: E704
    def progress(self, lease, step, pct, phase): return self._ok("progress")  # noqa: E704
    def checkpoint(self, lease, *a, **k): return self._ok("checkpoint", *a)  # noqa: E704
    def complete(self, lease, *a): return self._ok("complete", *a)  # noqa: E704
    def fail(self, lease, *a): return self._ok("fail", *a)  # noqa: E704
    def release(self, lease, reason="preempted"): return self._ok("release", reason)  # noqa: E704


def _lease(**resume) -> WorkerLease:
    return WorkerLease(job_id="j" + uuid.uuid4().hex, epoch=1, worker_id="w-storage", attempt=1,
                       lease_ttl_ms=30_000, lease_expires_at_ms=0, pool=POOL, gpu_type="storage",
                       spec=RenderSpec(model="tiny-t2v", prompt="a fox", duration_s=0.5, resolution="32x32", fps=8,
                                       seed=3, num_steps=STEPS), **resume)


def _value(text: str, line_start: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {line_start} in\n{text}")


@pytest.fixture(scope="module")
def renderer(tiny_model_dir):
    return Renderer(tiny_model_dir)


@pytest.fixture
def gone(settings):
    """The project's client on a port nothing listens on: every call is refused at once. One try per call, so
    the tries counted are the worker's own (botocore's add their backoff of up to 1 + 2 s to each)."""
    return s3_client(replace(settings, s3_endpoint_url=f"http://127.0.0.1:{free_port()}"), attempts=1)


def _run(renderer, artifacts_s3, checkpoint_s3, bucket: str, budgets: StorageBudgets, lease=None):
    plane, metrics = AcceptingControlPlane(), WorkerMetrics()
    run = JobRun(lease or _lease(), plane, renderer, artifacts_s3, CheckpointStore(checkpoint_s3, bucket),  # type: ignore[arg-type]
                 ArtifactStore(artifacts_s3, bucket), IntervalPolicy.fixed(1e-6), PreemptionNotice(20.0),
                 metrics=metrics, budgets=budgets)
    began = time.monotonic()
    outcome = run.run()
    return outcome, plane, generate_latest(metrics.registry).decode(), time.monotonic() - began


def test_checkpoints_the_store_does_not_take_are_skipped_and_the_render_goes_on(renderer, s3, bucket, gone):
    outcome, plane, text, _ = _run(renderer, s3, gone, bucket, StorageBudgets(checkpoint_s=0.6, storage_s=30))
    assert outcome.kind == "succeeded", outcome
    # Nothing recorded for a checkpoint that was not written: the job's durable checkpoint stays what it was.
    assert plane.kinds() == ["complete"]
    p = f'pool="{POOL}"'
    assert _value(text, f"spotreel_worker_checkpoint_failures_total{{{p}}}") == STEPS - 1  # one per step but the last
    assert _value(text, f'spotreel_worker_storage_retries_total{{op="checkpoint",{p}}}') >= STEPS - 1
    assert "spotreel_worker_checkpoint_seconds_count" not in text  # no cost measured from a failure
    head = s3.head_object(Bucket=bucket, Key=outcome.artifact_key)  # the video is in the real store
    assert head["ContentLength"] > 0


def test_a_video_the_store_does_not_take_within_the_budget_fails_the_attempt_saying_so(renderer, s3, bucket, gone):
    outcome, plane, text, seconds = _run(renderer, gone, s3, bucket, StorageBudgets(checkpoint_s=5, storage_s=1.5))
    assert outcome.kind == "failed", outcome
    fails = [args for kind, args in plane.sent if kind == "fail"]
    assert len(fails) == 1 and plane.kinds()[-1] == "fail"
    code, message, retryable = fails[0][:3]
    assert (code, retryable) == ("storage_unavailable", True)
    assert message.startswith("upload of video ") and " failed after " in message and "EndpointConnectionError" in message
    tries = int(message.split(" failed after ")[1].split(" ")[0])
    assert tries >= 3, message
    assert seconds < 60  # the budget (1.5 s) plus the render and one refused call, not botocore's minutes
    assert _value(text, f'spotreel_worker_storage_retries_total{{op="upload",pool="{POOL}"}}') == tries - 1


def test_a_resume_checkpoint_the_store_cannot_serve_is_not_called_invalid(renderer, s3, bucket, gone):
    # The store is down, not the checkpoint bad: reporting it invalid would make the scheduler drop it.
    lease = _lease(resume_checkpoint_key=f"ckpt/j{uuid.uuid4().hex}/e00000001/s000002.ckpt", resume_step=2)
    outcome, plane, _, _ = _run(renderer, s3, gone, bucket, StorageBudgets(checkpoint_s=5, storage_s=1.0), lease)
    assert outcome.kind == "failed", outcome
    (code, message, retryable, *rest), = [args for kind, args in plane.sent if kind == "fail"]
    assert code == "storage_unavailable" and retryable and message.startswith("read of checkpoint ckpt/")
    assert not [k for k in rest if k]  # no invalid_checkpoint_key


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    yield from start_private_seaweed(tmp_path_factory.mktemp("seaweed") / "home")


def test_a_stopped_store_is_noticed_by_the_read_timeout_and_a_put_retried_through_the_stop(store):
    """SIGSTOP: the kernel still accepts connections, so only the read timeout (1 s here) notices. A put with a
    2 s budget gives up in seconds; one with a 15 s budget lands once the store is continued after 4 s."""
    client = store.client(s3_read_timeout_ms=1000, s3_max_attempts=2)
    bucket = store.settings.s3_bucket_checkpoints
    client.put_object(Bucket=bucket, Key="warm", Body=b"x")
    store.pause()
    try:
        began = time.monotonic()
        with pytest.raises(StorageUnavailable) as caught:
            call_within(Budget(2.0), "checkpoint", lambda: client.put_object(Bucket=bucket, Key="a", Body=b"a"))
        took = time.monotonic() - began
        assert "ReadTimeoutError" in str(caught.value) or "ConnectTimeoutError" in str(caught.value), caught.value
        # at most the budget plus one call: 2 tries x 1 s read timeout and botocore's backoff between them
        assert 2.0 <= took < 2.0 + 2 * 1.0 + 2.5, took
        timer = threading.Timer(4.0, store.resume)
        timer.start()
        began = time.monotonic()
        call_within(Budget(15.0), "checkpoint", lambda: client.put_object(Bucket=bucket, Key="b", Body=b"b"))
        took = time.monotonic() - began
        timer.join()
    finally:
        store.resume()
    assert 4.0 <= took < 12.0, took
    assert client.get_object(Bucket=bucket, Key="b")["Body"].read() == b"b"
