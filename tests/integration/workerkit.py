"""A control plane for worker tests and real `spotreel worker` processes against it.

One `Plane` per test module: its own topic prefix, keyspace and buckets, the real scheduler (schedkit's
SchedulerProc) and the real gateway, both as subprocesses. Tests isolate themselves from each other by
model name (a pool is model × GPU type), so they can share one plane and its start-up cost. The reference
render (an uninterrupted run of the same request in this process) is what resumed videos must equal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from spotreel.domain import events as ev
from spotreel.platform.migrate import migrate
from spotreel.platform.ports import free_port
from spotreel.tenancy import create_worker_key
from spotreel.config.settings import Settings
from tests.integration.prockit import json_lines, terminate_group
from tests.integration.schedkit import ROOT, Bus, SchedulerProc, drop_topics, make_topics, submit

GPU = "cpu"
# Small enough for a 2-core machine (about 0.1 s a step), big enough that a kill lands mid-run.
RESOLUTION, DURATION_S, FPS, STEPS = "32x32", 0.5, 8, 24


@dataclass
class Plane:
    settings: Settings
    worker_key: str
    gateway_url: str
    model_dir: Path
    tmp: Path
    bus: Bus
    s3: Any
    # More environment for the plane's processes (a private S3 store's endpoint, say).
    extra_env: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        s = self.settings
        return dict(os.environ, PYTHONUNBUFFERED="1", SPOTREEL_TOPIC_PREFIX=s.topic_prefix,
                    SPOTREEL_PARTITIONS=str(s.partitions), SPOTREEL_CASSANDRA_KEYSPACE=s.cassandra_keyspace,
                    SPOTREEL_S3_BUCKET_ARTIFACTS=s.s3_bucket_artifacts,
                    SPOTREEL_S3_BUCKET_CHECKPOINTS=s.s3_bucket_checkpoints, **self.extra_env)

    def submit(self, model: str, sampler_tag: str = "", **overrides: Any):
        key = f"{model}-{sampler_tag}-{uuid.uuid4().hex[:6]}"
        command = submit("acme", key, model=model, gpu_type=GPU, resolution=overrides.pop("resolution", RESOLUTION),
                         duration_s=overrides.pop("duration_s", DURATION_S), fps=FPS, num_steps=overrides.pop("num_steps", STEPS), seed=overrides.pop("seed", 1234),
                         prompt=overrides.pop("prompt", "a red fox running in snow"), **overrides)
        self.bus.send(command)
        return command

    def worker(self, name: str, model: str, transport: str = "http", *extra: str,
               env: dict[str, str] | None = None) -> "WorkerProc":
        return WorkerProc(self, name, model, transport, extra, env=env)


class WorkerProc:
    """`spotreel worker` in its own process group, its JSON lines on stdout kept in a file."""

    def __init__(self, plane: Plane, name: str, model: str, transport: str, extra: tuple[str, ...],
                 gpu: str = GPU, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.worker_id = f"{name}-{uuid.uuid4().hex[:6]}"
        self.out = plane.tmp / f"worker-{self.worker_id}.out"
        self.err = plane.tmp / f"worker-{self.worker_id}.err"
        argv = [sys.executable, "-m", "spotreel.cli", "worker", "--pool", f"{model}@{gpu}",
                "--worker-id", self.worker_id, "--transport", transport, "--gateway-url", plane.gateway_url,
                "--worker-key", plane.worker_key, "--threads", "1", "--lease-wait", "5",
                # A worker started by registry name (--model) takes its directory from the registry.
                *(() if "--model" in extra else ("--model-dir", str(plane.model_dir))), *extra]
        self._files = open(self.out, "ab"), open(self.err, "ab")
        self.proc = subprocess.Popen(argv, cwd=ROOT, env={**plane.env(), **(env or {})}, stdout=self._files[0],
                                     stderr=self._files[1], start_new_session=True)

    def lines(self) -> list[dict[str, Any]]:
        return json_lines(self.out)

    def logs(self) -> str:
        return f"--- stdout\n{self.out.read_text(errors='replace')[-3000:]}\n--- stderr\n" \
               f"{self.err.read_text(errors='replace')[-5000:]}"

    def wait_line(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 120.0, what: str = "line") -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines():
                if pred(line):
                    return line
            if self.proc.poll() is not None:
                for line in self.lines():
                    if pred(line):
                        return line
                raise AssertionError(f"worker {self.name} exited ({self.proc.returncode}) before {what}:\n"
                                     f"{self.logs()}")
            time.sleep(0.05)
        raise AssertionError(f"worker {self.name}: no {what} in {timeout}s:\n{self.logs()}")

    def wait_ready(self, timeout: float = 120.0) -> None:
        self.wait_line(lambda l: l.get("event") == "registered", timeout, "registration")

    def outcomes(self) -> list[dict[str, Any]]:
        return [l for l in self.lines() if l.get("event") == "job"]

    def signal(self, sig: int) -> None:
        os.killpg(self.proc.pid, sig)

    def wait_exit(self, timeout: float = 120.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker {self.name} still running after {timeout}s:\n{self.logs()}") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGCONT)
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(30)
        for f in self._files:
            f.close()


class GatewayProc:
    def __init__(self, plane_env: dict[str, str], port: int, tmp: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = tmp / "gateway.log"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "spotreel.cli", "gateway", "--port", str(port)],
                                     cwd=ROOT, env=plane_env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def wait_healthy(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"gateway exited:\n{self.log_path.read_text(errors='replace')[-4000:]}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"gateway not healthy in {timeout}s:\n{self.log_path.read_text(errors='replace')[-4000:]}")

    def stop(self) -> None:
        terminate_group(self.proc, 20, 20)
        self._log.close()


def plane_settings(base: Settings, token: str) -> Settings:
    return replace(base, topic_prefix=f"test.{token}", cassandra_keyspace=token, partitions=3,
                   s3_bucket_artifacts=f"{token}-art", s3_bucket_checkpoints=f"{token}-ckpt")


def tiny_model(settings: Settings) -> Path:
    """The tiny model, built once per machine into the cache (the build is idempotent and deterministic)."""
    from spotreel.worker.model_tiny import build_tiny_model

    target = settings.cache_dir / "test-models" / "tiny-t2v"
    build_tiny_model(target)
    return target


def start_plane(base: Settings, stack, tmp: Path, env: dict[str, str] | None = None,
                gateway_env: dict[str, str] | None = None):
    """Generator for a module fixture: yields a Plane, tears everything down afterwards. `env`: more
    environment for its scheduler, gateway and workers (with `stack.s3_endpoint` naming the same store);
    `gateway_env`: more for the gateway alone (a model registry, say)."""
    import boto3
    from botocore.config import Config
    from cassandra.cluster import Cluster

    token = "w" + uuid.uuid4().hex[:12]
    s = plane_settings(base, token)
    make_topics(s)
    model_dir = tiny_model(base)
    s3 = boto3.client("s3", endpoint_url=stack.s3_endpoint, aws_access_key_id=stack.s3_access_key,
                      aws_secret_access_key=stack.s3_secret_key, region_name=stack.s3_region,
                      config=Config(s3={"addressing_style": "path"}))
    cluster = Cluster([stack.cassandra_host], port=stack.cassandra_port, protocol_version=5)
    session = cluster.connect()
    migrate(session, token, say=lambda *_: None)
    key = create_worker_key(session, "fleet-test")
    for b in (s.s3_bucket_artifacts, s.s3_bucket_checkpoints):
        s3.create_bucket(Bucket=b)
    sched = SchedulerProc(s, tmp)
    probe = Plane(s, key, "", model_dir, tmp, None, s3, dict(env or {}))  # type: ignore[arg-type]
    gw = GatewayProc({**probe.env(), **(gateway_env or {})}, free_port(), tmp)
    bus = Bus(s)
    try:
        sched.wait_owning({0, 1, 2}, timeout=120)
        gw.wait_healthy()
        yield replace(probe, gateway_url=gw.url, bus=bus)
    finally:
        bus.close()
        gw.stop()
        sched.stop()
        drop_topics(s)
        for b in (s.s3_bucket_artifacts, s.s3_bucket_checkpoints):
            for obj in s3.list_objects_v2(Bucket=b).get("Contents", []):
                s3.delete_object(Bucket=b, Key=obj["Key"])
            s3.delete_bucket(Bucket=b)
        session.execute(f"DROP KEYSPACE IF EXISTS {token}")
        cluster.shutdown()


# -- reading the outcome ----------------------------------------------------------------------------------

def events_of(bus: Bus, job_id: str, cls: type) -> list[Any]:
    return [e for e in bus.job_events(job_id) if isinstance(e, cls)]


def wait_done(bus: Bus, job_id: str, timeout: float = 150.0) -> ev.JobSucceeded:
    return bus.wait_event(job_id, ev.JobSucceeded, timeout=timeout)


def stop_all(*workers: WorkerProc | None) -> None:
    """Every worker a test started (None: one it did not get to start) stopped, killed if still running."""
    for worker in workers:
        if worker is not None:
            worker.stop()


def finished_by(plane: Plane, job_id: str, worker: WorkerProc, timeout: float = 150.0) -> ev.JobSucceeded:
    """The job's success, once `worker`, the one expected to finish it, has exited cleanly."""
    done = wait_done(plane.bus, job_id, timeout)
    assert worker.wait_exit(60) == 0, worker.logs()
    return done


def video_frames_checksum(plane: Plane, key: str) -> str:
    head = plane.s3.head_object(Bucket=plane.settings.s3_bucket_artifacts, Key=key)
    return head["Metadata"]["frames-sha256"]


def artifact_keys(plane: Plane, job_id: str) -> list[str]:
    listed = plane.s3.list_objects_v2(Bucket=plane.settings.s3_bucket_artifacts, Prefix=f"videos/{job_id}/")
    return sorted(o["Key"] for o in listed.get("Contents", []))


def reference_checksum(model_dir: Path, command, sampler: str) -> str:
    """The uninterrupted run: same model, request and seed, rendered here from step 0 to the end. The job's own
    guidance and negative prompt when it names them (else the worker's defaults: none); `sampler` is the one
    the job ran with."""
    import torch

    from spotreel.worker.hf_logging import quietly
    from spotreel.worker.render_loop import Renderer, RenderRequest
    from spotreel.media.video import frames_checksum

    spec = getattr(command, "spec", command)  # a SubmitJob's RenderSpec, or the same fields flat
    req = RenderRequest.from_job(prompt=spec.prompt, seed=spec.seed, num_steps=spec.num_steps,
                                 resolution=spec.resolution, duration_s=spec.duration_s, fps=spec.fps,
                                 sampler=sampler,
                                 guidance_scale=1.0 if getattr(spec, "guidance_scale", None) is None
                                 else spec.guidance_scale,
                                 negative_prompt=getattr(spec, "negative_prompt", None) or "")
    if (model_dir, req) not in _references:
        torch.set_num_threads(1)  # as the workers run (--threads 1): same reduction order, same bits
        renderer = quietly(lambda: Renderer(model_dir))
        state = renderer.start(req)
        while not state.done:
            state = renderer.step(state)
        _references[(model_dir, req)] = frames_checksum(renderer.finish(state))
    return _references[(model_dir, req)]


# Several tests render the same request: the uninterrupted run is computed once per session.
_references: dict[tuple[Path, Any], str] = {}
