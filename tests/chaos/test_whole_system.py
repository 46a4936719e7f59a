"""The whole system under fire: a stream of jobs from three tenants through the public API, rendered by real
`spotreel worker` processes, while the test (seeded, the seed printed) kills and restarts everything:

- workers: kill -9 and SIGTERM mid-job (each replaced by a fresh process, as a spot fleet would), and one
  SIGSTOPped past its lease, then SIGCONTed: its late commands must all be refused;
- the scheduler, the projector and the gateway: kill -9, restarted by `spotreel infra up`;
- the Kafka broker and Cassandra: stopped and started again (every service must reconnect by itself).

Then the events topic is folded per job (tests/chaos/audit.py) and the outcome checked against what was
accepted: exactly one terminal event per job, no gap or duplicate in any history, no state change from an
old epoch, one referenced video per success whose frames equal an undisturbed reference render of the same
request, the read model and the downloads agreeing with the events, and every webhook delivered. The
figures are printed to the terminal whatever pytest's capture settings.

The stack is private (its own SPOTREEL_HOME under tmp_path and its own ports): restarting Kafka and
Cassandra here never disturbs the stack other tests share. `SPOTREEL_CHAOS_SEED=N` replays a plan.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from spotreel.domain import events as ev
from spotreel.platform.cql import cql_session
from spotreel.platform.seed import DEV_WORKER_KEY
from spotreel.tenancy import create_tenant, create_webhook_secret
from spotreel.config.settings import Settings
from spotreel.worker.artifacts import CONTENT_META, FRAMES_META
from spotreel.media.video import probe
from tests.chaos.audit import TERMINAL, audit
from tests.chaos.wholekit import (EventLog, Fleet, HookReceiver, PlaneView, Submitter, Tally, api, download,
                                  orders, read_events, request_of, sha256, wait_until)
from tests.harness.private_stack import start_private_stack
from tests.integration.workerkit import reference_checksum, tiny_model

pytestmark = [pytest.mark.chaos, pytest.mark.serial, pytest.mark.timeout(1500)]

# At least MIN_JOBS jobs; MAX_JOBS only bounds a runaway stream. The number made is set by how long the
# chaos lasts: while a lane runs, the fleet must always have work (a low bound would run out of jobs while
# the worker lane still waits for a busy worker).
MIN_JOBS, MAX_JOBS = 12, 60
IN_FLIGHT = 6  # unfinished jobs the stream keeps ahead of the fleet while the chaos goes on
REQUESTS = [
    {"prompt": "a red fox running in snow", "seed": 1234},
    {"prompt": "a small boat on a calm lake", "seed": 77},
    {"prompt": "a city street at night", "seed": 9001},
]
SHAPE = {"num_steps": 16, "resolution": "32x32", "duration": 0.5, "fps": 8}
TTL_MS = 8000
WORKER_ARGS = ("--lease-ttl-ms", str(TTL_MS), "--checkpoint-every", "1.0", "--grace", "15")
# Two lanes run at once, so worker faults also land while a server is down.
WORKER_FAULTS = ("worker_kill9", "worker_sigterm", "worker_sigstop")
SERVER_FAULTS = ("scheduler_kill9", "projector_kill9", "gateway_kill9", "kafka_restart", "cassandra_restart")
# After a Cassandra restart, the gateway's reads must work again within this (the driver reconnects).
READS_BACK_S = 30.0


def emit(config: pytest.Config, text: str) -> None:
    """Straight to the terminal, with or without -s (what CI shows)."""
    capman = config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        print(text, flush=True)


@pytest.fixture
def whole(tmp_path_factory, request):
    home = tmp_path_factory.mktemp("whole-system") / "home"
    yield from start_private_stack(home, log=lambda line: emit(request.config, f"  [private stack] {line}"),
                                   partitions=3, webhook_allow_private=1, stop_timeout=30)


class Scenario:
    def __init__(self, stack, tmp, config, seed: int) -> None:
        self.stack = stack
        self.s = stack.settings
        self.config = config
        self.seed = seed
        self.t0 = time.monotonic()
        self.tally = Tally()
        self.log = EventLog(self.s)
        self.fleet = Fleet(PlaneView(stack, tmp, DEV_WORKER_KEY, tiny_model(Settings())), WORKER_ARGS)
        self._fleet_lock = threading.Lock()
        with cql_session(self.s, keyspace=self.s.cassandra_keyspace) as session:
            self.keys = {"dev": self.s.dev_api_key, "acme": create_tenant(session, "acme"),
                         "globex": create_tenant(session, "globex")}
            self.secrets = {t: create_webhook_secret(session, t) for t in self.keys}
        self.hooks = HookReceiver(self.secrets)
        # The undisturbed renders the videos are compared with, computed here while the chaos runs.
        self.references: dict[tuple, str] = {}
        self._refs = threading.Thread(target=self._render_references, name="references", daemon=True)
        self._refs.start()
        self.sub = Submitter(self.s.gateway_url, orders(random.Random(seed), self.keys, MAX_JOBS,
                                                        [{**r, **SHAPE} for r in REQUESTS], self.hooks.url))

    def _render_references(self) -> None:
        try:
            for body in REQUESTS:
                full = {**body, **SHAPE}
                self.references[request_of(full)] = reference_checksum(self.fleet.plane.model_dir, _command(full),
                                                                        "ddim")
        except Exception as exc:  # noqa: BLE001 - reported where the references are needed
            self.references_failed = f"{type(exc).__name__}: {exc}"

    def reference(self, body: dict[str, Any]) -> str:
        self._refs.join(600)
        assert request_of(body) in self.references, getattr(self, "references_failed", "reference render unfinished")
        return self.references[request_of(body)]

    def note(self, line: str) -> None:
        emit(self.config, f"  {time.monotonic() - self.t0:6.1f}s  {line}")

    # -- following the system -----------------------------------------------------------------------------

    def terminal(self) -> set[str]:
        return self.log.ended(TERMINAL)

    def unfinished(self) -> int:
        return self.sub.allowed - len(self.terminal() & set(self.sub.jobs())) - len(self.sub.refused)

    def feed(self) -> None:
        """Keep IN_FLIGHT jobs ahead of the fleet while orders last."""
        short = IN_FLIGHT - self.unfinished()
        if short > 0:
            self.sub.allow(short)

    def steps(self) -> int:
        return sum(1 for w in list(self.fleet.workers) for line in w.lines() if line.get("event") == "step")

    def wait_progress(self, what: str, timeout: float = 300.0) -> float:
        """Until a worker made three more denoising steps (or nothing is left to do); returns the seconds."""
        began, base = time.monotonic(), self.steps()

        def moved() -> bool:
            self.feed()
            return self.steps() >= base + 3 or (self.sub.settled() and self.unfinished() <= 0)

        wait_until(moved, timeout, f"progress after {what}", every=0.3, on_timeout=self.diagnose)
        return time.monotonic() - began

    # -- the chaos ------------------------------------------------------------------------------------------

    def lane(self, name: str, faults: list[str]) -> None:
        rng = random.Random(f"{self.seed}-{name}")
        for fault in faults:
            began = time.monotonic()
            if fault.startswith("worker_"):
                getattr(self, fault)(rng)
            else:
                self.server_fault(fault)
            self.tally.count(fault)
            self.tally.time(f"{fault}: back to rendering (s)", time.monotonic() - began + self.wait_progress(fault))

    def server_fault(self, fault: str) -> None:
        began = time.monotonic()
        self.sub.allow(1)  # a submission in flight across the outage
        if fault.endswith("_kill9"):
            name = fault.removesuffix("_kill9")
            self.note(f"kill -9 {name} (pid {self.stack.kill9(name)}); `infra up` restarts it")
        else:
            name = fault.removesuffix("_restart")
            self.note(f"stopping {name} (pid {self.stack.pid(name)}); `infra up` starts it again")
            self.stack.stop(name)
        started = self.stack.up()
        self.note(f"  {name} answers again {time.monotonic() - began:.1f} s after the fault")
        # Anything else `infra up` had to start died by itself: a service that does not survive a restart of
        # Kafka or Cassandra (or a neighbour's kill) would otherwise be healed here without anyone noticing.
        assert started == [name], f"`infra up` after the {fault} also had to start {started}"
        if name == "cassandra":
            self.tally.time("gateway reads Cassandra again after it answered (s)", self.reads_back())

    def reads_back(self) -> float:
        began = time.monotonic()
        # When Cassandra is the first fault, the first submission may still be retrying: wait for its 202
        # (the gateway needs Cassandra to accept it) before reading it back.
        jobs = wait_until(self.sub.jobs, READS_BACK_S, f"a submission accepted (bound {READS_BACK_S:.0f} s)",
                          every=0.25, on_timeout=self.diagnose)
        job, accepted = next(iter(jobs.items()))
        key = self.keys[accepted.order.tenant]
        wait_until(lambda: api(self.s.gateway_url, key, "GET", f"/v1/videos/{job}")[0] == 200, READS_BACK_S,
                   f"the gateway to read Cassandra again (bound {READS_BACK_S:.0f} s)", every=0.25,
                   on_timeout=self.diagnose)
        return time.monotonic() - began

    def busy_worker(self, rng: random.Random, max_step: int = SHAPE["num_steps"]) -> tuple[Any, str, int, int]:
        def pick():
            self.feed()
            assert self.sub.allowed < MAX_JOBS or self.unfinished() > 0, (
                f"all {MAX_JOBS} orders ended before the worker lane found a busy worker")
            return sorted(([b for b in self.fleet.busy(2) if b[3] <= max_step]), key=lambda b: b[0].worker_id)

        return rng.choice(wait_until(pick, 300, "a worker in the middle of a job", on_timeout=self.diagnose))

    def replace(self, rng: random.Random, gone) -> None:
        transport = rng.choice(("http", "http", "kafka"))
        with self._fleet_lock:
            w = self.fleet.start(transport)
        self.note(f"  replacement worker {w.worker_id} ({transport}) for {gone.worker_id}")

    def worker_kill9(self, rng: random.Random) -> None:
        w, job, epoch, step = self.busy_worker(rng)
        w.signal(signal.SIGKILL)
        w.wait_exit(30)
        self.note(f"kill -9 worker {w.worker_id} at step {step} of {job[:12]}… epoch {epoch}")
        self.replace(rng, w)

    def worker_sigterm(self, rng: random.Random) -> None:
        w, job, epoch, step = self.busy_worker(rng)
        w.signal(signal.SIGTERM)
        # 143: the --grace watchdog ended it (a release that could not get through while a server was down).
        code = w.wait_exit(60)
        assert code in (0, 143), w.logs()
        outcome = [o["outcome"] for o in w.outcomes() if o["job_id"] == job and o["epoch"] == epoch]
        self.note(f"SIGTERM worker {w.worker_id} at step {step} of {job[:12]}… epoch {epoch}: exit {code}, "
                  f"{outcome[0] if outcome else 'no outcome'}")
        self.replace(rng, w)

    def worker_sigstop(self, rng: random.Random) -> None:
        w, job, epoch, step = self.busy_worker(rng, max_step=SHAPE["num_steps"] - 4)
        w.signal(signal.SIGSTOP)
        self.note(f"SIGSTOP worker {w.worker_id} at step {step} of {job[:12]}… epoch {epoch}")

        def expired_or_done():
            self.feed()
            return [e for e in self.log.job_events(job)
                    if isinstance(e, ev.LeaseExpired) and e.epoch == epoch or isinstance(e, TERMINAL)]

        seen = wait_until(expired_or_done, 300, f"the lease of {job} epoch {epoch} to expire", on_timeout=self.diagnose)
        w.signal(signal.SIGCONT)
        self.note(f"  {type(seen[0]).__name__} (epoch {epoch}); SIGCONT")
        done = w.wait_line(lambda line: line.get("event") == "job" and line["job_id"] == job and line["epoch"] == epoch,
                           timeout=300, what="the paused worker's outcome")
        self.note(f"  the paused worker's lease ended: {done['outcome']} ({done.get('detail')})")
        if isinstance(seen[0], ev.LeaseExpired):
            assert done["outcome"] == "stale", done

    # -- the end --------------------------------------------------------------------------------------------

    def drain(self, timeout: float = 420.0) -> None:
        wait_until(lambda: self.sub.settled() and set(self.sub.jobs()) <= self.terminal(), timeout,
                   "every accepted job to reach a terminal state", every=0.5, on_timeout=self.diagnose)

    def diagnose(self) -> str:
        from spotreel.domain.evolve import fold

        lines = [f"accepted {len(self.sub.jobs())}, allowed {self.sub.allowed}, refused {self.sub.refused}"]
        done = self.terminal()
        for job in self.sub.jobs():
            if job not in done:
                history = self.log.job_events(job)
                st = fold(history)
                lines.append(f"  unfinished {job}: {st.status if st else 'no events'} epoch "
                             f"{st.epoch if st else '-'} last events {[type(e).__name__ for e in history][-8:]}")
        for w in self.fleet.alive():
            lines.append(f"--- worker {w.worker_id}\n{w.logs()[-2500:]}")
        return "\n".join(lines) + "\n" + self.stack.log_tails(2000)

    def close(self) -> None:
        """Stop everything this scenario started; a failure here must not hide the test's own."""
        self.sub.stop.set()
        for step in (self.fleet.stop_all, self.hooks.close, self.log.close):
            try:
                step()
            except Exception as exc:  # noqa: BLE001
                self.note(f"cleanup {step.__qualname__} failed: {type(exc).__name__}: {exc}")


def test_whole_system_survives_chaos(whole, tmp_path, request):
    seed = int(os.environ.get("SPOTREEL_CHAOS_SEED") or random.SystemRandom().randrange(1_000_000))
    config = request.config
    emit(config, f"\nwhole-system chaos: seed {seed} (SPOTREEL_CHAOS_SEED={seed} replays this plan)")
    rng = random.Random(seed)
    started = time.monotonic()
    sc = Scenario(whole, tmp_path, config, seed)
    figures: list[str] = []
    try:
        for transport in ("http", "http", "kafka"):
            sc.fleet.start(transport)
        for w in sc.fleet.workers:
            w.wait_ready(180)
        sc.sub.start()
        sc.feed()
        lanes = {"workers": rng.sample(WORKER_FAULTS, len(WORKER_FAULTS)),
                 "servers": rng.sample(SERVER_FAULTS, len(SERVER_FAULTS))}
        for name, plan in lanes.items():
            sc.note(f"{name} lane: {', '.join(plan)}")
        chaos_began = time.monotonic()
        with ThreadPoolExecutor(2, thread_name_prefix="lane") as pool:
            for fut in [pool.submit(sc.lane, name, plan) for name, plan in lanes.items()]:
                fut.result()
        chaos_s = time.monotonic() - chaos_began
        sc.sub.allow(MIN_JOBS - sc.sub.allowed)
        sc.note(f"chaos over; waiting for every accepted job to end ({sc.sub.allowed} submitted)")
        sc.drain()
        drained_s = time.monotonic() - chaos_began - chaos_s
        verify_began = time.monotonic()
        figures = verify(sc)
        figures.append(f"  wall time: {time.monotonic() - started:.0f} s in the test: chaos {chaos_s:.0f} s, "
                       f"drain {drained_s:.0f} s, checks {time.monotonic() - verify_began:.0f} s "
                       "(the private stack's start and stop are printed above and below)")
    finally:
        emit(config, "\n".join(["", f"whole-system chaos figures (seed {seed}):", *figures,
                                f"  faults: {dict(sorted(sc.tally.kills.items()))}",
                                *(f"  {k}: {v}" for k, v in sorted(sc.tally.timings.items()))]))
        sc.close()


def verify(sc: Scenario) -> list[str]:
    s, jobs = sc.s, sc.sub.jobs()
    assert not sc.sub.refused, sc.sub.refused
    events = read_events(s)
    result = audit(events, jobs)
    assert not result.problems, "\n".join(result.problems)
    outcomes = result.outcomes()
    assert outcomes == Counter({"JobSucceeded": len(jobs)}), outcomes

    # Each success: its one video, under its epoch, frames equal to the undisturbed reference render.
    s3 = _s3(s)
    orphans = 0
    for job, a in result.jobs.items():
        done = a.succeeded
        head = s3.head_object(Bucket=s.s3_bucket_artifacts, Key=done.artifact_key)
        assert head["Metadata"][FRAMES_META] == sc.reference(jobs[job].order.body), (job, done.artifact_key)
        assert head["Metadata"][CONTENT_META] == done.artifact_checksum
        listed = s3.list_objects_v2(Bucket=s.s3_bucket_artifacts, Prefix=f"videos/{job}/").get("Contents", [])
        orphans += sum(1 for o in listed if o["Key"] != done.artifact_key)

    # The read model and the API agree with the events; every MP4 downloads with its checksum and decodes.
    for job, a in result.jobs.items():
        key = sc.keys[jobs[job].order.tenant]
        done = a.succeeded
        view = wait_until(lambda: (lambda r: r[1] if r[0] == 200 and r[1].get("status") == "succeeded" else None)(
            api(s.gateway_url, key, "GET", f"/v1/videos/{job}")), 120, f"{job} succeeded in the read model")
        assert view["result"]["sha256"] == done.artifact_checksum and view["attempt"]["lease_epoch"] == done.epoch
        mp4 = download(s.gateway_url, key, job)
        assert sha256(mp4) == done.artifact_checksum
        info = probe(mp4)
        assert info["frames"] == int(SHAPE["duration"] * SHAPE["fps"]), info

    # Webhooks: each terminal event delivered, signed with its own tenant's secret.
    wanted = {f"{job}.v{a.terminal[0].version}": jobs[job].order.tenant for job, a in result.jobs.items()}
    wait_until(lambda: set(wanted) <= set(sc.hooks.signers()), 120, "every webhook", every=0.5,
               on_timeout=lambda: f"missing {sorted(set(wanted) - set(sc.hooks.signers()))}")
    signers = sc.hooks.signers()
    assert all(signers[e] == {t} for e, t in wanted.items()) and not sc.hooks.bad, (signers, sc.hooks.bad)

    assert sc.stack.healthy(), "a component of the private stack is down at the end:\n" + sc.stack.log_tails()
    outs = Counter(o["outcome"] for o in sc.fleet.outcomes())
    stale = result.stale_rejections()
    assert result.total("resumes") >= 1, "no job resumed from a checkpoint"
    assert outs["stale"] >= 1, "the paused worker was not refused"
    kinds = result.kinds()
    per_tenant = Counter(jobs[j].order.tenant for j in jobs)
    return [
        f"  jobs accepted: {len(jobs)} ({', '.join(f'{t} {n}' for t, n in sorted(per_tenant.items()))}); "
        f"submissions retried while something was down: {sc.sub.retries}",
        f"  terminal states: {dict(outcomes)}; exactly one terminal event per job: yes; history gaps/duplicates: 0",
        f"  workers started: {sc.fleet.started} (3 at the start, one replacement per worker lost)",
        f"  leases: {kinds['JobLeased']}, resumed from a checkpoint: {result.total('resumes')}, "
        f"lease expiries: {kinds['LeaseExpired']}, releases: {kinds['LeaseReleased']}, "
        f"attempt failures: {kinds['AttemptFailed']}",
        f"  worker-side lease outcomes: {dict(outs)}",
        f"  the test's event reader replaced after a silent stall: {sc.log.replaced} time(s)",
        f"  stale writes refused by the scheduler (recorded): {stale} of {sum(result.rejections().values())} "
        f"rejections {dict(result.rejections())}; accepted events from an old epoch: 0 "
        f"(of {result.total('fenced_applied')} fenced events)",
        f"  videos: one referenced per success, frames equal to the reference render ({len(sc.references)} "
        f"distinct requests); unreferenced uploads left by killed workers: {orphans}",
        f"  webhooks: {len(wanted)} delivered and verified ({len(sc.hooks.received)} received)",
        f"  events on the topic: {len(events)}",
    ]


def _s3(s: Settings):
    from spotreel.platform.s3 import s3_client

    return s3_client(s, timeout=30.0)


def _command(body: dict[str, Any]):
    from types import SimpleNamespace

    return SimpleNamespace(prompt=body["prompt"], seed=body["seed"], num_steps=body["num_steps"],
                           resolution=body["resolution"], duration_s=body["duration"], fps=body["fps"])
