"""A worker started for one registry model (`spotreel worker --model NAME`) hands a lease for another model back
unused (ReleaseLease "unclaimed", which the domain counts as no attempt) without loading or rendering anything;
and `spotreel model list` prints the registry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from spotreel.domain.checkpoint_interval import IntervalPolicy
from spotreel.worker.job import JobRun
from spotreel.worker.signals import PreemptionNotice
from spotreel.domain.spec import RenderSpec
from spotreel.worker.transport import WorkerLease, Verdict

pytestmark = pytest.mark.unit


class Plane:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def release(self, lease, reason="preempted"):
        self.sent.append(("release", reason))
        return Verdict(accepted=True)

    def fail(self, lease, *args):
        self.sent.append(("fail", args[0]))
        return Verdict(accepted=True)

    def __getattr__(self, name):  # any other command would be a test failure
        raise AssertionError(f"unexpected {name}")


def lease(model: str) -> WorkerLease:
    return WorkerLease(job_id="j" + uuid.uuid4().hex, epoch=1, worker_id="w", attempt=1, lease_ttl_ms=30_000,
                 lease_expires_at_ms=0, pool=f"{model}@any", gpu_type="any",
                 spec=RenderSpec(model=model, prompt="a fox", duration_s=0.5, resolution="32x32", fps=8, seed=3,
                                 num_steps=4))


def test_a_lease_for_another_model_is_released_unclaimed_without_rendering():
    plane = Plane()
    outcome = JobRun(lease("zeroscope"), plane, None, None, None, None,  # type: ignore[arg-type]
                     IntervalPolicy.fixed(1.0), PreemptionNotice(20.0), model="wan-1_3b").run()
    assert outcome.kind == "wrong_model" and "zeroscope" in outcome.detail
    assert plane.sent == [("release", "unclaimed")]


class RecordingRenderer:
    default_sampler = "unipc"

    def __init__(self) -> None:
        self.seen = None

    def check(self, req):
        self.seen = req
        raise ValueError("recorded")


def test_the_pools_guidance_negative_prompt_and_the_familys_sampler_reach_the_render_request():
    plane, renderer = Plane(), RecordingRenderer()
    JobRun(lease("wan-1_3b"), plane, renderer, None, None, None,  # type: ignore[arg-type]
           IntervalPolicy.fixed(1.0), PreemptionNotice(20.0), model="wan-1_3b", guidance_scale=5.0,
           negative_prompt="blurry").run()
    req = renderer.seen
    assert (req.sampler, req.guidance_scale, req.negative_prompt) == ("unipc", 5.0, "blurry")
    assert plane.sent == [("fail", "invalid_request")]


def run_cli(*argv: str, registry: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPOTREEL_MODEL_REGISTRY=registry)
    return subprocess.run([sys.executable, "-m", "spotreel.cli", *argv], env=env, capture_output=True, text=True,
                          timeout=60)


def test_model_list_prints_the_registry(tmp_path):
    path = tmp_path / "models.toml"
    path.write_text('[models.tiny-wan]\ndirectory = "/m/wan"\nfamily = "wan"\nsizes = ["16x16"]\n'
                    'frames = { min = 5, max = 9, step = 4 }\nsteps = { max = 30 }\npool = "cpu"\n')
    out = run_cli("model", "list", "--json", registry=str(path))
    assert out.returncode == 0, out.stderr
    [doc] = [json.loads(line) for line in out.stdout.splitlines()]
    assert doc["name"] == "tiny-wan" and doc["frames"] == "4n+1 from 5 to 9" and doc["sampler"] == "unipc"
    bad = tmp_path / "bad.toml"
    bad.write_text('[models.x]\nfamily = "mochi"\n')
    out = run_cli("model", "list", registry=str(bad))
    assert out.returncode == 1 and "family must be one of" in out.stderr


def test_a_worker_for_one_model_refuses_a_pool_of_another(tmp_path):
    path = tmp_path / "models.toml"
    path.write_text('[models.tiny-wan]\ndirectory = "/m/wan"\nfamily = "wan"\nsizes = ["16x16"]\n'
                    'frames = { max = 9 }\nsteps = { max = 30 }\n')
    out = run_cli("worker", "--model", "tiny-wan", "--pool", "zeroscope@any", "--once", registry=str(path))
    assert out.returncode != 0 and "other models ['zeroscope']" in out.stderr
    out = run_cli("worker", "--model", "nope", "--once", registry=str(path))
    assert out.returncode != 0 and "known: tiny-wan" in out.stderr
