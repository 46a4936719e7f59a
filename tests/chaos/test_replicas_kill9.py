"""Two gateways behind HAProxy and three schedulers in one Faust group, jobs flowing through simulated
workers that speak the real HTTP worker API through the load balancer; then kill -9 of one gateway, of one
scheduler, and (after `ensure_up` brought both back, as `infra up` does) of the other gateway and a second
scheduler at the same moment. Nobody intervenes between the faults.

Judged on the events topic (tests/chaos/audit.py): every accepted job ends exactly once, succeeded, with
no gap, duplicate or stale-epoch change in its history. Printed: the time to dispatch again after each
fault (the first lease granted anywhere, the first lease on a partition the killed scheduler owned, the
first lease reaching a worker whose polls the killed gateway served).

The first scheduler killed is started again (as `infra up` does) before the last fault, and the last
fault's takeover waits until it owns partitions again: so a scheduler restarted while the others ran takes
part in taking over a killed peer's partitions, the case whose changelog recovery once read nothing of
them for minutes (services/scheduler/recoverywatch.py now seeks such a partition again).

The services are private (own home, ports, topic prefix and keyspace, as the fleet simulator's) on the
shared Kafka and Cassandra, which no fault here touches; no projector or notifier runs (nothing here reads
the read models beyond the gateway's submission claims).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import aiohttp
import pytest

from spotreel.adapters.partitioning import partition_for
from spotreel.devstack import replicas
from spotreel.platform.processes import group_members
from spotreel.devstack.services import services
from spotreel.domain import events as ev
from tests.chaos.audit import TERMINAL, audit
from tests.chaos.wholekit import EventLog, read_events

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(300)]

PARTITIONS = 4
WORKERS = 6
STEPS, STEP_S = 5, 0.4  # 2 s of "rendering" a job
TTL_MS = 5000  # the workers' lease TTL: what a lease granted through a gateway that died costs, plus HOLD_S
HOLD_S = 5  # the schedulers' gateway hold (services/scheduler/intake.py): a dead gateway holds expiries this long
BACKLOG = WORKERS + 3  # queued jobs kept ahead of the fleet while the faults go on
SETTLE_S = 8.0  # jobs keep flowing this long after each fault before the next
MODEL, GPU = "tiny-t2v", "rk-sim-gpu"  # the local registry's model; no worker here loads it


@dataclass
class Plane:
    settings: object
    comps: dict = field(default_factory=dict)
    tenant_key: str = ""
    worker_key: str = ""

    @property
    def url(self) -> str:
        return self.settings.gateway_url

    def pid(self, name: str) -> int | None:
        running = self.comps[name].running()
        return running.pid if running else None

    def kill9(self, name: str) -> None:
        pid = self.pid(name)
        assert pid is not None, f"{name} is not running"
        os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while group_members(pid):
            assert time.monotonic() < deadline, f"{name} survived SIGKILL"
            time.sleep(0.05)

    def ensure_up(self, names: list[str]) -> None:
        with ThreadPoolExecutor(len(names)) as pool:
            list(pool.map(lambda n: self.comps[n].ensure_up(lambda line: None), names))

    def log_size(self, name: str) -> int:
        log = self.comps[name].main_log()
        return log.stat().st_size if log.exists() else 0

    def owned(self, scheduler: str, since: int = 0) -> set[int]:
        """The partitions its log (from byte `since` on) says it owns since its last assignment (its lag gauge
        keeps the labels of partitions it lost)."""
        text = self.comps[scheduler].main_log().read_bytes()[since:].decode(errors="replace")
        found = re.findall(r"scheduler owns partitions \[([\d, ]*)\]", text)
        return {int(p) for p in found[-1].split(",") if p.strip()} if found else set()


@pytest.fixture
def plane(stack, settings, tmp_path_factory):
    from spotreel.adapters.kafka import delete_topics, ensure_scheduler_topics
    from spotreel.platform.cql import cql_session
    from spotreel.platform.migrate import migrate
    from spotreel.services.simulator.stack import _free_block
    from spotreel.tenancy import create_tenant, create_worker_key
    from spotreel.devstack.settings import launcher_settings

    run = uuid.uuid4().hex[:8]
    # A short home: HAProxy refuses a stats socket path over 97 characters, and the test's own tmp_path (the
    # test's name, under an xdist worker's popen-gwN/ too) passes that.
    s = replace(launcher_settings(settings), home=tmp_path_factory.mktemp("rk") / "home", topic_prefix=f"rk.{run}", cassandra_keyspace=f"rk_{run}",
                gateway_port=_free_block(settings.host), partitions=PARTITIONS, stop_timeout=10,
                scheduler_gateway_hold_s=HOLD_S)
    ensure_scheduler_topics(s)
    p = Plane(s)
    with cql_session(s) as session:
        migrate(session, s.cassandra_keyspace, say=lambda *_: None)
        p.tenant_key = create_tenant(session, "acme", rate_per_minute=6000, max_in_flight=1000)
        p.worker_key = create_worker_key(session, "chaos-fleet")
    replicas.save(s, replicas.make_plan(s, replicas.parse("gateway=2,scheduler=3")))
    p.comps = {c.name: c for c in services(s) if c.name.split("-")[0] in ("gateway", "scheduler", "haproxy")}
    try:
        p.ensure_up(list(p.comps))
        yield p
    finally:
        for comp in p.comps.values():
            comp.stop(lambda line: None)
        delete_topics(s)
        with cql_session(s) as session:
            session.execute(f"DROP KEYSPACE IF EXISTS {s.cassandra_keyspace}")


class Run:
    """The simulated fleet and the client, on one event loop."""

    def __init__(self, plane: Plane, http: aiohttp.ClientSession, log: EventLog) -> None:
        self.plane = plane
        self.http = http
        self.log = log
        self.accepted: list[str] = []
        self.served: list[tuple[float, str, str]] = []  # (time, worker, gateway) of every lease delivered
        self.polls: list[tuple[float, str, str]] = []  # (time, worker, gateway) of every answered lease poll
        self.last_gateway: dict[str, str] = {}  # worker -> the gateway that served its last poll
        self.submitting = True
        self.stop = asyncio.Event()
        self.errors: dict[str, int] = {}

    @property
    def completed(self) -> int:
        """Accepted jobs with a terminal event on the events topic."""
        return len(self.log.ended(TERMINAL) & set(self.accepted))

    async def post(self, path: str, body: dict, key: str, headers: dict | None = None,
                   timeout: float = 20.0) -> tuple[int, dict | None, str]:
        try:
            async with self.http.post(self.plane.url + path, json=body, timeout=aiohttp.ClientTimeout(total=timeout),
                                      headers={"Authorization": f"Bearer {key}", **(headers or {})}) as r:
                data = await r.json(content_type=None) if r.status < 500 and r.status != 204 else None
                if r.status >= 500:  # HAProxy's own page when a gateway died under the request
                    self.errors[str(r.status)] = self.errors.get(str(r.status), 0) + 1
                return r.status, data, r.headers.get("X-Spotreel-Gateway", "")
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            self.errors[type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1
            return 0, None, ""

    async def submitter(self) -> None:
        while self.submitting:
            if len(self.accepted) - self.completed >= BACKLOG:
                await asyncio.sleep(0.1)
                continue
            key = f"rk-{uuid.uuid4().hex}"
            body = {"prompt": f"chaos {key}", "model": MODEL, "gpu_type": GPU, "num_steps": STEPS,
                    "resolution": "64x64", "duration": 1.0}
            while True:  # the same Idempotency-Key makes a retry safe, whichever gateway answers it
                status, data, _ = await self.post("/v1/videos", body, self.plane.tenant_key, {"Idempotency-Key": key})
                if status == 202:
                    self.accepted.append(data["job_id"])
                    break
                await asyncio.sleep(0.3)

    async def worker(self, wid: str) -> None:
        await self.post(f"/internal/workers/{wid}/register", {"gpu_type": GPU, "models": [MODEL]}, self.plane.worker_key)
        while not self.stop.is_set():
            status, lease, gw = await self.post(
                f"/internal/workers/{wid}/lease", {"gpu_type": GPU, "models": [MODEL], "wait_seconds": 3,
                                                   "lease_ttl_ms": TTL_MS}, self.plane.worker_key)
            if status in (200, 204):
                self.polls.append((time.monotonic(), wid, gw))
            if status == 200 and lease:
                self.served.append((time.monotonic(), wid, gw))
                self.last_gateway[wid] = gw
                await self.render(wid, lease)
            elif status == 204:
                self.last_gateway[wid] = gw
            else:
                await asyncio.sleep(0.3)

    async def render(self, wid: str, lease: dict) -> None:
        job, fence = lease["job_id"], {"epoch": lease["epoch"], "worker_id": wid}
        last_renewal = time.monotonic()
        for step in range(lease.get("resume_step") or 0, STEPS):
            await asyncio.sleep(STEP_S)
            if time.monotonic() - last_renewal >= TTL_MS / 3000:
                status, _, _ = await self.post(f"/internal/leases/{job}/progress",
                                               {**fence, "step": step + 1, "progress_pct": 100 * (step + 1) / STEPS},
                                               self.plane.worker_key)
                if status == 409:
                    return  # fenced: the lease is gone
                if status in (200, 202):
                    last_renewal = time.monotonic()
        while not self.stop.is_set():
            status, _, _ = await self.post(f"/internal/leases/{job}/complete",
                                           {**fence, "artifact_key": f"videos/{job}/e{lease['epoch']:08d}/video.mp4",
                                            "artifact_checksum": "0" * 64, "artifact_size_bytes": 1},
                                           self.plane.worker_key)
            if status in (200, 202, 409):
                return  # done, judged later (the audit reads the verdict), or fenced
            await asyncio.sleep(0.3)  # no answer (a gateway died under the request): again


def _first_lease_after(events: list, t_ms: int, partitions: set[int] | None = None) -> float | None:
    times = [e.at_ms for e in events if isinstance(e, ev.JobLeased) and e.at_ms >= t_ms
             and (partitions is None or partition_for(e.job_id, PARTITIONS) in partitions)]
    return (min(times) - t_ms) / 1000 if times else None


def test_gateways_and_schedulers_killed_under_load_lose_and_duplicate_nothing(plane, request):
    t_test = time.monotonic()
    faults: list[dict] = []

    async def scenario() -> Run:
        lb = plane.comps["haproxy"]
        deadline = time.monotonic() + 30
        while sorted(lb.servers().values()) != ["UP", "UP"]:  # else every worker starts on the first one up
            assert time.monotonic() < deadline, lb.servers()
            await asyncio.sleep(0.2)
        async with aiohttp.ClientSession() as http:
            run = Run(plane, http, log)
            tasks = [asyncio.create_task(run.submitter())]
            tasks += [asyncio.create_task(run.worker(f"rkw{i}")) for i in range(WORKERS)]

            async def until(pred, timeout: float, what: str, why=lambda: "") -> None:
                deadline = time.monotonic() + timeout
                while not pred():
                    assert time.monotonic() < deadline, f"timed out waiting for {what}: {why()}"
                    await asyncio.sleep(0.1)

            await until(lambda: run.completed >= 4, 60, "the first jobs to complete")

            async def fault(label: str, gateways: list[str], schedulers: list[str]) -> None:
                owned = set().union(*(plane.owned(s) for s in schedulers)) if schedulers else set()
                served_by_dead = {w for w, g in run.last_gateway.items() if g in gateways}
                done_before = run.completed
                await asyncio.gather(*(asyncio.to_thread(plane.kill9, n) for n in gateways + schedulers))
                t_ms, t0 = int(time.time() * 1000), time.monotonic()  # from when every victim is gone
                faults.append({"fault": label, "t_ms": t_ms, "t0": t0, "owned": owned, "workers": served_by_dead})
                await until(lambda: run.completed >= done_before + 6, 90, f"jobs to complete after {label}")
                await asyncio.sleep(SETTLE_S)

            await fault("kill -9 gateway", ["gateway"], [])
            await fault("kill -9 scheduler", [], ["scheduler"])
            before = plane.log_size("scheduler")
            await asyncio.to_thread(plane.ensure_up, ["gateway", "scheduler"])  # what `infra up` does
            await until(lambda: "UP" in str(lb.servers().get("gateway")), 30,
                        "HAProxy to see the restarted gateway")
            await until(lambda: bool(plane.owned("scheduler", before)), 60,
                        "the restarted scheduler to own partitions")
            await fault("kill -9 gateway-2 + scheduler-2 at once", ["gateway-2"], ["scheduler-2"])
            run.submitting = False
            await tasks[0]
            await until(lambda: run.completed >= len(run.accepted), 60, "every accepted job to end",
                        lambda: {j: [type(e).__name__ for e in log.job_events(j)][-4:]
                                 for j in set(run.accepted) - log.ended(TERMINAL)})
            run.stop.set()
            await asyncio.wait(tasks[1:], timeout=30)
            return run

    log = EventLog(plane.settings)
    try:
        run = asyncio.run(scenario())
    except BaseException:
        for comp in plane.comps.values():
            print(f"----- {comp.name}: {comp.main_log()}\n{comp.main_log().read_text(errors='replace')[-3000:]}")
        raise
    finally:
        log.close()
    events = read_events(plane.settings)
    result = audit(events, run.accepted)
    lines = [f"replicas chaos: {len(run.accepted)} jobs accepted, {run.completed} completed, outcomes "
             f"{dict(result.outcomes())}, rejections {dict(result.rejections())}, client errors {run.errors}, "
             f"{time.monotonic() - t_test:.0f} s"]
    for f in faults:
        anywhere = _first_lease_after(events, f["t_ms"])
        owned = _first_lease_after(events, f["t_ms"], f["owned"]) if f["owned"] else None
        back = [t - f["t0"] for t, w, _ in run.served if w in f["workers"] and t >= f["t0"]]
        lines.append(f"  {f['fault']}: next lease {anywhere} s; on the dead scheduler's partitions "
                     f"{sorted(f['owned'])}: {owned} s; to a worker the dead gateway served "
                     f"({len(f['workers'])}): {round(min(back), 1) if back else None} s")
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        print("\n" + "\n".join(lines), flush=True)
    assert not result.problems, result.problems[:10]
    # While both gateways were up, each worker's polls reached one of them (HAProxy's hashing on the worker id).
    before = {}
    for t, w, g in run.polls:
        if t < faults[0]["t0"]:
            before.setdefault(w, set()).add(g)
    assert all(len(g) == 1 for g in before.values()) and len(before) == WORKERS, before
    assert set().union(*before.values()) == {"gateway", "gateway-2"}, before
    assert dict(result.outcomes()) == {"JobSucceeded": len(run.accepted)}
    assert len(run.accepted) >= 20
    for f in faults:
        assert _first_lease_after(events, f["t_ms"]) is not None, f"no lease after {f['fault']}"
        if f["owned"]:
            assert _first_lease_after(events, f["t_ms"], f["owned"]) is not None, f"{f['fault']}: partitions dead"
