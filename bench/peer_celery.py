"""Peer comparison: the same preemptible workload through Celery + Redis and through spotreel, in one run.

Workload: jobs of K steps of a fixed sleep, arriving as a Poisson stream; W workers, each killed after an
exponential lifetime (mean MTBF) and replaced by a new one.
- Celery: redis-server (Debian) on 127.0.0.1 and a random port, started and stopped here; W `celery worker`
  processes (prefork, concurrency 1, acks_late, reject_on_worker_lost, prefetch 1, visibility timeout V);
  a kill is a real `kill -9` of the worker's process group. The tasks log starts, steps and completions in
  Redis (bench/peer/celery_app.py).
- spotreel: the real scheduler, projector and gateway (private topics/keyspace, `spotreel simulate`'s
  machinery) and W simulated workers over the worker API; a kill is a worker that vanishes without notice
  (no release: its lease expires), so both sides get the same, worst kind of preemption.

    .venv/bin/python bench/peer_celery.py --workers 8 --jobs-rate 0.5 --seconds 60 --mtbf 60
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from spotreel.platform.ports import free_port
from spotreel.fleetsim.config import SimConfig
from spotreel.fleetsim.figures import percentile
from spotreel.services.simulator.run import simulate
from spotreel.config.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Workload:
    workers: int
    rate: float
    seconds: float
    steps: int
    step_s: float
    mtbf_s: float
    drain_s: float
    visibility_s: float
    seed: int


def arrivals(w: Workload) -> list[float]:
    """Offsets (s) of the Poisson submissions; the same seed gives the same stream to both systems."""
    rng, t, out = random.Random(w.seed), 0.0, []
    while True:
        t += rng.expovariate(w.rate)
        if t >= w.seconds:
            return out
        out.append(t)


class Redis:
    def __init__(self, tmp: Path) -> None:
        if shutil.which("redis-server") is None:
            raise SystemExit("peer_celery: redis-server not found (apt-get install -y redis-server)")
        self.port = free_port("127.0.0.1")
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--dir", str(tmp), "--protected-mode", "yes"],
            stdout=open(tmp / "redis.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True)
        import redis

        self.client = redis.Redis(host="127.0.0.1", port=self.port)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise SystemExit(f"peer_celery: redis-server did not start (see {tmp / 'redis.log'})")
                time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class CeleryFleet:
    def __init__(self, w: Workload, broker: str, tmp: Path) -> None:
        self.w, self.tmp = w, tmp
        self.env = dict(os.environ, PEER_BROKER_URL=broker, PEER_VISIBILITY_S=str(w.visibility_s),
                        PYTHONPATH=str(ROOT / "bench" / "peer"))
        self.rng = random.Random(w.seed + 1)
        self.slots: list[tuple[subprocess.Popen, float]] = []
        self.kills = 0
        self.made = 0

    def _spawn(self) -> tuple[subprocess.Popen, float]:
        self.made += 1
        log = open(self.tmp / f"celery-{self.made}.log", "wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "--pool=prefork", "--concurrency=1",
             "--prefetch-multiplier=1", "--without-gossip", "--without-mingle", "--loglevel=WARNING",
             "-n", f"w{self.made}-{uuid.uuid4().hex[:4]}@peer"],
            cwd=self.tmp, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        life = self.rng.expovariate(1.0 / self.w.mtbf_s) if self.w.mtbf_s > 0 else float("inf")
        return proc, time.monotonic() + life

    def start(self) -> None:
        self.slots = [self._spawn() for _ in range(self.w.workers)]

    def tick(self) -> None:
        """kill -9 every worker whose time is up (its whole process group: the machine is gone); replace it."""
        for i, (proc, dies_at) in enumerate(self.slots):
            if time.monotonic() >= dies_at:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(10)
                self.kills += 1
                self.slots[i] = self._spawn()

    def stop(self) -> None:
        for proc, _ in self.slots:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(10)


def run_celery(w: Workload) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="peer-celery-"))
    redis_srv = Redis(tmp)
    fleet = None
    try:
        os.environ["PEER_BROKER_URL"] = redis_srv.url
        sys.path.insert(0, str(ROOT / "bench" / "peer"))
        import celery_app  # noqa: E402 - configured from the environment just set

        celery_app.app.conf.broker_url = redis_srv.url
        fleet = CeleryFleet(w, redis_srv.url, tmp)
        fleet.start()
        time.sleep(3.0)  # let the first workers connect; their start-up is not what is measured
        published: dict[str, float] = {}
        t0 = time.monotonic()
        wall0 = time.time()
        for offset in arrivals(w):
            while time.monotonic() < t0 + offset:
                fleet.tick()
                time.sleep(min(0.05, max(0.0, t0 + offset - time.monotonic())))
            job_id = uuid.uuid4().hex
            published[job_id] = time.time()
            celery_app.run_job.apply_async((job_id, w.steps, w.step_s))
        end = time.monotonic() + w.drain_s
        r = redis_srv.client
        while time.monotonic() < end:
            fleet.tick()
            done = {x.decode().split("|")[0] for x in r.lrange("peer:done", 0, -1)}
            if done >= set(published):
                break
            time.sleep(0.2)
        starts = [x.decode().split("|") for x in r.lrange("peer:starts", 0, -1)]
        dones = [x.decode().split("|") for x in r.lrange("peer:done", 0, -1)]
        steps_run = int(r.get("peer:steps") or 0)
    finally:
        if fleet is not None:
            fleet.stop()
        redis_srv.stop()
    first_start: dict[str, float] = {}
    for job, at, _ in starts:
        first_start.setdefault(job, float(at))
    completions: dict[str, int] = {}
    for job, _, _ in dones:
        completions[job] = completions.get(job, 0) + 1
    last_done = max((float(at) for _, at, _ in dones), default=wall0)
    completed = sum(1 for j in published if j in completions)
    dispatch = [(first_start[j] - published[j]) * 1000 for j in published if j in first_start]
    return {
        "system": "celery+redis", "accepted": len(published), "completed": completed,
        "lost": len(published) - completed, "duplicated": sum(1 for n in completions.values() if n > 1),
        # first publish to last completion, as spotreel's makespan (first 202 to last terminal event)
        "throughput_per_s": completed / max(1e-6, last_done - min(published.values(), default=wall0)),
        "dispatch_p50_ms": percentile(dispatch, 50), "dispatch_p99_ms": percentile(dispatch, 99),
        "wasted_gpu_seconds": (steps_run - completed * w.steps) * w.step_s,
        "kills": fleet.kills if fleet else 0, "starts": len(starts),
    }


def run_spotreel(w: Workload, out: Path | None) -> dict:
    cfg = SimConfig(workers=(w.workers,), stage_s=w.seconds, drain_s=w.drain_s, submit_rate=w.rate,
                    tenants=(("peer", 1.0),), tiers=((0, 1.0),), steps=w.steps, step_s=w.step_s,
                    checkpoint_cost_s=0.2, policy="adaptive", mtbf_s=w.mtbf_s, notice_share=0.0, cold_start_s=2.0,
                    seed=w.seed)
    r = simulate(cfg, Settings.from_env(), out, say=lambda line: print(line, file=sys.stderr))
    return {
        "system": "spotreel", "accepted": r["accepted"], "completed": r["completed"], "lost": r["lost"],
        "duplicated": r["duplicated"],
        "throughput_per_s": r["completed"] / r["makespan_s"] if r.get("makespan_s") else 0.0,
        "dispatch_p50_ms": r["dispatch_latency"]["p50_ms"], "dispatch_p99_ms": r["dispatch_latency"]["p99_ms"],
        "wasted_gpu_seconds": r["wasted_gpu_seconds"],
        "checkpoint_overhead_gpu_seconds": r["checkpoint_overhead_gpu_seconds"],
        # every machine beyond the first W replaced one that died (busy or idle), as Celery's kills count
        "kills": r["workers_made"] - w.workers, "starts": r["leases"],
    }


def table(w: Workload, rows: list[dict]) -> str:
    head = (f"{w.workers} workers, Poisson {w.rate:g} jobs/s for {w.seconds:g} s, jobs of {w.steps} x {w.step_s:g} s, "
            f"kill -9 / vanish MTBF {w.mtbf_s:g} s per worker, Celery visibility timeout {w.visibility_s:g} s\n\n"
            "| system | accepted | completed | lost | duplicated | throughput jobs/s | dispatch p50 / p99 ms "
            "| wasted GPU-s | kills | starts |\n|---|---|---|---|---|---|---|---|---|---|\n")

    def ms(v):
        return "-" if v is None else f"{v:.0f}"

    return head + "\n".join(
        f"| {r['system']} | {r['accepted']} | {r['completed']} | {r['lost']} | {r['duplicated']} | "
        f"{r['throughput_per_s']:.3f} | {ms(r['dispatch_p50_ms'])} / {ms(r['dispatch_p99_ms'])} | "
        f"{r['wasted_gpu_seconds']:.0f} | {r['kills']} | {r['starts']} |" for r in rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--jobs-rate", type=float, default=0.5, help="submissions per second")
    p.add_argument("--seconds", type=float, default=60.0, help="how long jobs are submitted")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--step-s", type=float, default=1.0)
    p.add_argument("--mtbf", type=float, default=60.0, help="mean seconds until a worker is killed (0: never)")
    p.add_argument("--drain", type=float, default=120.0, help="seconds to wait for the last jobs")
    p.add_argument("--visibility", type=float, default=30.0, help="Celery/Redis visibility timeout, seconds")
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--only", choices=("celery", "spotreel"), default=None)
    p.add_argument("--json", dest="json_path", type=Path, default=None)
    a = p.parse_args(argv)
    if a.workers < 1 or a.jobs_rate <= 0 or a.seconds <= 0 or a.steps < 1 or a.step_s <= 0 or a.mtbf < 0:
        p.error("workers, steps >= 1; rate, seconds, step-s > 0; mtbf >= 0")
    w = Workload(a.workers, a.jobs_rate, a.seconds, a.steps, a.step_s, a.mtbf, a.drain, a.visibility, a.seed)
    rows = []
    if a.only in (None, "celery"):
        rows.append(run_celery(w))
    if a.only in (None, "spotreel"):
        rows.append(run_spotreel(w, None))
    print(table(w, rows))
    if a.json_path:
        a.json_path.write_text(json.dumps({"workload": w.__dict__, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
