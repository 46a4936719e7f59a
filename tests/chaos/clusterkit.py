"""Moving parts of the cluster chaos test (test_cluster_kill9.py): simulated workers and a submitter on the public
and worker HTTP APIs of a private 3-node stack, and the cluster's own account of its health (under-replicated
partitions, Cassandra nodes up and NORMAL in gossip).

The workers are threads that speak the real worker protocol (register, long-poll a lease, complete) and only
pretend to render (a sleep), so the test costs the cluster's time, not a GPU's; each remembers the gateway that
answered its last poll (HAProxy's X-Spotreel-Gateway). Also two verbs the test needs beyond PrivateStack:
`infra up` with flags (`--nodes 3 --replicas ...`) and kill -9 of several components in the same instant.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass

from spotreel.platform.seed import DEV_WORKER_KEY
from spotreel.config.settings import Settings

# The local registry's model (its gateway refuses others); the simulated GPU type keeps the pool to this test.
MODEL = "tiny-t2v"
GPU = "sim-gpu"
GATEWAY_HEADER = "X-Spotreel-Gateway"  # set by HAProxy in front of several gateways (devstack/haproxy.py)


def post(url: str, key: str, body: dict, headers: dict[str, str] | None = None,
         timeout: float = 30.0) -> tuple[int, dict | None]:
    """(status, json); status 0 when the request itself failed (connection refused, timeout)."""
    status, data, _ = post_via(url, key, body, headers, timeout)
    return status, data


def post_via(url: str, key: str, body: dict, headers: dict[str, str] | None = None,
             timeout: float = 30.0) -> tuple[int, dict | None, str]:
    """(status, json, the gateway that answered: HAProxy's X-Spotreel-Gateway, "" without a balancer)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                                          **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - the test's own loopback
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None), resp.headers.get(GATEWAY_HEADER, "")
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, (json.loads(raw) if raw else None), exc.headers.get(GATEWAY_HEADER, "")
        except ValueError:
            return exc.code, None, exc.headers.get(GATEWAY_HEADER, "")
    except (urllib.error.URLError, OSError):
        return 0, None, ""


def get(url: str, key: str, timeout: float = 10.0) -> tuple[int, dict | None]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, OSError, ValueError):
        return 0, None


@dataclass
class Grant:
    job_id: str
    at: float  # time.time() the worker got the lease
    worker: str = ""
    gateway: str = ""  # the gateway that delivered it ("" without a balancer)


class SimWorker(threading.Thread):
    """Register, then: long-poll a lease, 'render' `steps` steps of `step_s`, complete; until stopped."""

    def __init__(self, url: str, grants: list[Grant], steps: int, step_s: float, stop: threading.Event) -> None:
        super().__init__(daemon=True, name="sim-worker")
        self.url, self.grants, self.steps, self.step_s, self.stopping = url, grants, steps, step_s, stop
        self.id = f"sim-{uuid.uuid4().hex[:10]}"
        self.completed = 0
        self.errors = 0
        self.gateway = ""  # the gateway that answered its last lease poll

    def call(self, path: str, body: dict, timeout: float = 30.0) -> tuple[int, dict | None]:
        status, data, gateway = post_via(self.url + path, DEV_WORKER_KEY, body, timeout=timeout)
        if status == 0 or status >= 500:
            self.errors += 1
        elif path.endswith("/lease"):
            self.gateway = gateway
        return status, data

    def run(self) -> None:
        profile = {"gpu_type": GPU, "models": [MODEL]}
        while not self.stopping.is_set() and self.call(f"/internal/workers/{self.id}/register", profile)[0] != 200:
            time.sleep(0.5)
        while not self.stopping.is_set():
            status, lease = self.call(f"/internal/workers/{self.id}/lease",
                                      {**profile, "wait_seconds": 3.0, "lease_ttl_ms": 20_000}, timeout=40)
            if status == 200 and lease:
                self.grants.append(Grant(lease["job_id"], time.time(), self.id, self.gateway))
                self.render(lease)
            elif status != 204:
                time.sleep(0.5)  # the gateway is struggling (a server is down): back off a little

    def render(self, lease: dict) -> None:
        job, epoch = lease["job_id"], lease["epoch"]
        time.sleep(self.steps * self.step_s)
        body = {"epoch": epoch, "worker_id": self.id, "artifact_key": f"videos/{job}/e{epoch:08d}/video.mp4",
                "artifact_checksum": "0" * 64, "artifact_size_bytes": 1}
        # Until a verdict: 200 accepted, 409 fenced or already ended (a retry of an accepted completion).
        for _ in range(60):
            status, _ = self.call(f"/internal/leases/{job}/complete", body)
            if status in (200, 409):
                self.completed += status == 200
                return
            time.sleep(0.5)


class Submitter(threading.Thread):
    """POST /v1/videos at `rate` per second; a failed POST is retried with its Idempotency-Key until answered,
    so every job the API acknowledged (202) is known, with when it was acknowledged."""

    def __init__(self, url: str, key: str, rate: float, steps: int) -> None:
        super().__init__(daemon=True, name="submitter")
        self.url, self.key, self.rate, self.steps = url, key, rate, steps
        self.accepted: dict[str, float] = {}  # job id -> time.time() of the 202
        self.refused = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            t0 = time.monotonic()
            self.submit_one()
            self.stopping.wait(max(0.0, 1.0 / self.rate - (time.monotonic() - t0)))

    def submit_one(self) -> None:
        body = {"prompt": f"cluster chaos {uuid.uuid4().hex[:8]}", "model": MODEL, "gpu_type": GPU,
                "num_steps": self.steps, "resolution": "64x64", "duration": 1.0}
        idem = uuid.uuid4().hex
        for _ in range(120):
            status, data = post(self.url + "/v1/videos", self.key, body, {"Idempotency-Key": idem}, timeout=15)
            if status == 202 and data:
                self.accepted[data["job_id"]] = time.time()
                return
            if 400 <= status < 500 and status != 429:
                self.refused += 1
                return
            time.sleep(0.5)
        self.refused += 1


def under_replicated(settings: Settings, timeout: float = 10.0) -> int:
    """Partitions (of every topic) whose in-sync replicas are fewer than their replicas, or that have no leader."""
    from spotreel.platform.topics import admin_client

    md = admin_client(settings.kafka_bootstrap, timeout).list_topics(timeout=timeout)
    return sum(1 for t in md.topics.values() for p in t.partitions.values()
               if p.leader < 0 or len(p.isrs) < len(p.replicas))


def cassandra_normal(settings: Settings, timeout: float = 10.0) -> tuple[int, int]:
    """(nodes the driver has up, nodes gossip reports NORMAL) seen through the contact points."""
    from spotreel.platform.cql import cql_session

    with cql_session(settings, timeout) as session:
        up = sum(1 for h in session.cluster.metadata.all_hosts() if h.is_up)
        rows = session.execute("SELECT status_with_port FROM system_views.gossip_info", timeout=timeout)
        normal = sum(1 for r in rows if (r.status_with_port or "").startswith("NORMAL"))
    return up, normal


def infra_up(stack, *args: str, timeout: float = 600.0) -> list[str]:
    """`spotreel infra up ARGS` on a private stack (tests/harness/private_stack.py), e.g. `--nodes 3 --replicas
    gateway=2,scheduler=2`; returns the components it had to start."""
    from tests.harness.private_stack import ROOT

    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "spotreel.cli", "infra", "up", *args], cwd=ROOT, env=stack.env,
                          capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"`spotreel infra up {' '.join(args)}` on the private stack failed ({proc.returncode}):"
                           f"\n{out}\n{stack.log_tails()}")
    stack.log(f"infra up {' '.join(args)}: {time.monotonic() - t0:.1f} s")
    found = re.search(r"\(started ([^)]*)\)", out)
    return [name.strip() for name in found.group(1).split(",")] if found else []


def kill9_at_once(stack, names: list[str], timeout: float = 30.0) -> None:
    """SIGKILL every named component's process group of a private stack before waiting for any to go."""
    from spotreel.platform.processes import group_members

    pids = {name: stack.pid(name) for name in names}
    missing = [n for n, p in pids.items() if p is None]
    assert not missing, f"{', '.join(missing)} not running on the private stack"
    for pid in pids.values():
        os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while any(group_members(pid) for pid in pids.values()):
        assert time.monotonic() < deadline, f"{names} survived SIGKILL for {timeout} s"
        time.sleep(0.05)
