"""Simulated GPU workers and clients that speak the real protocols: HTTP to a gateway, or, for the workers
with `--transport kafka`, Kafka straight to the scheduler (services/simulator/kafka_link.py).

One aiohttp session, one asyncio task per worker. A worker: cold start → register → long-poll a lease →
compute steps (sleeps of `step_s`), heartbeat and progress on their own cadence, checkpoints by policy →
complete. Its machine dies after an exponential lifetime (mean `mtbf_s`): with notice it writes an emergency
checkpoint and releases the lease; without, it vanishes and the lease expires. The fleet replaces every
dead machine with a new one (a new worker id), as a spot fleet does.

Under the capacity manager's `simulated` provider (provider_sim.py) the notice goes to the provider instead,
`notice_lead_s` before the machine dies, and it is the manager's drain that makes the worker checkpoint and
hand its lease back, as SIGTERM does to a real worker; a machine nobody drained in time vanishes.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import aiohttp

from spotreel.dispatch.intake import SENT_AT_HTTP_HEADER
from spotreel.dispatch.listener import DispatchUnavailable
from spotreel.fleetsim.config import SimConfig
from spotreel.fleetsim.figures import Accepted, Attempt, WorkerLife
from spotreel.fleetsim.waste import adaptive_interval_s
from spotreel.domain.checkpoint_interval import estimated_mtbf_s
from spotreel.domain.leases import quiet_s


class Meter:
    """Round-trip times and failures of HTTP calls by kind, for the current ramp stage."""

    def __init__(self) -> None:
        self.rtt: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)
        self.statuses: dict[str, int] = defaultdict(int)
        # How late the simulator's own event loop woke a 100 ms timer (ms): a round trip above includes up to
        # this much of the simulator's queueing, which a fleet of separate machines would not have.
        self.loop_lag: list[float] = []
        # Full (generation 2) collections of the simulator's garbage collector, in ms: one process holding
        # thousands of workers' state pauses for each, which separate machines would not.
        self.gc_full_ms: list[float] = []
        # Over Kafka: how long each renewal's verdict took from its send (ms), answered in time or late (a
        # verdict that never came counts as the whole wait, 10 s); what a pending answer hides.
        self.verdict_wait: list[float] = []

    def take(self) -> "Meter":
        old = Meter()
        old.rtt, old.errors, old.statuses = self.rtt, self.errors, self.statuses
        old.loop_lag, old.gc_full_ms, old.verdict_wait = self.loop_lag, self.gc_full_ms, self.verdict_wait
        self.rtt, self.errors, self.statuses = defaultdict(list), defaultdict(int), defaultdict(int)
        self.loop_lag, self.gc_full_ms, self.verdict_wait = [], [], []
        return old

    def watch_gc(self) -> Callable[[], None]:
        """Record every full collection's pause (`gc_full_ms`) until the returned function is called."""
        started: list[float] = []

        def on_gc(phase: str, info: dict[str, Any]) -> None:
            if info.get("generation") != 2:
                return
            if phase == "start":
                started[:] = [time.perf_counter()]
            elif started:
                self.gc_full_ms.append((time.perf_counter() - started.pop()) * 1000)

        gc.callbacks.append(on_gc)
        return lambda: gc.callbacks.remove(on_gc)

    async def watch_loop(self, every_s: float = 0.1) -> None:
        """Until cancelled: how late the loop wakes this task (`loop_lag`)."""
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time() + every_s
            await asyncio.sleep(every_s)
            self.loop_lag.append(max(0.0, (loop.time() - asked) * 1000))


@dataclass
class Shared:
    cfg: SimConfig
    base_url: str
    worker_key: str
    tenant_keys: dict[str, str]
    model: str
    gpu_type: str
    session: aiohttp.ClientSession
    rng: random.Random
    meter: Meter = field(default_factory=Meter)
    accepted: list[Accepted] = field(default_factory=list)
    refused: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    attempts: list[Attempt] = field(default_factory=list)
    lives: list[WorkerLife] = field(default_factory=list)
    vanished_at: list[float] = field(default_factory=list)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    # `--transport kafka`: the workers' requests go over Kafka (services/simulator/kafka_link.py, KafkaLink), clients' still over HTTP.
    link: Any = None
    # The machines' true MTBF now (the ramp changes it per stage with --mtbf A,B,...; 0: no preemptions).
    mtbf_now_s: float = -1.0

    def __post_init__(self) -> None:
        if self.mtbf_now_s < 0:
            self.mtbf_now_s = self.cfg.stage_mtbf_s(0)

    def mtbf_estimate_s(self, lease: dict[str, Any] | None = None) -> float:
        """What an adaptive worker takes for the MTBF at this lease: the prior, moved by the pool's lease
        losses the answer carries (worker/runtime.py does the same with worker/interval.py)."""
        c = self.cfg
        losses = (lease or {}).get("pool_lease_losses_1h")
        leased_s = (lease or {}).get("pool_leased_seconds_1h")
        if losses is None or leased_s is None:
            return c.prior_mtbf_s
        return estimated_mtbf_s(c.prior_mtbf_s, c.mtbf_prior_losses, losses, leased_s)

    def interval_s(self, lease: dict[str, Any] | None = None) -> float | None:
        c = self.cfg
        if c.policy == "none":
            return None
        if c.policy == "fixed":
            return c.fixed_interval_s
        return adaptive_interval_s(c.checkpoint_cost_s, self.mtbf_estimate_s(lease), *c.interval_bounds_s)

    async def call(self, kind: str, path: str, body: dict[str, Any], key: str | None = None,
                   headers: dict[str, str] | None = None, timeout: float = 30.0) -> tuple[int, Any]:
        """POST; returns (status, json or None). Status 0: the request itself failed (counted as an error)."""
        t0 = time.perf_counter()
        if self.link is not None and kind != "submit":
            try:
                status, data = await self.link.call(kind, path, body, timeout)
            except (DispatchUnavailable, asyncio.TimeoutError):
                self.meter.errors[kind] += 1
                return 0, None
            self.meter.rtt[kind].append((time.perf_counter() - t0) * 1000)
            self.meter.statuses[f"{kind}:{status}"] += 1
            return status, data
        try:
            async with self.session.post(
                    self.base_url + path, json=body, timeout=aiohttp.ClientTimeout(total=timeout),
                    headers={"Authorization": f"Bearer {key or self.worker_key}",
                             SENT_AT_HTTP_HEADER: str(int(time.time() * 1000)), **(headers or {})}) as r:
                data = await r.json(content_type=None) if r.status != 204 else None
                status = r.status
                retry_after = r.headers.get("Retry-After", "")
                if retry_after.isdigit() and isinstance(data, dict) and isinstance(data.get("error"), dict):
                    data["error"]["retry_after_s"] = int(retry_after)  # as the worker's HTTP transport keeps it
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            self.meter.errors[kind] += 1
            return 0, None
        self.meter.rtt[kind].append((time.perf_counter() - t0) * 1000)
        self.meter.statuses[f"{kind}:{status}"] += 1
        if status >= 500 and not (status == 503 and retry_after.isdigit()):
            self.meter.errors[kind] += 1  # a 503 with Retry-After (overloaded, shed) is an answer: in statuses
        return status, data


class _Job:
    """The state one attempt shares between its compute loop and its reporter task."""

    def __init__(self, lease: dict[str, Any], worker_id: str) -> None:
        self.lease = lease
        self.leased_at_ms = int(time.time() * 1000)
        self.job_id = lease["job_id"]
        self.epoch = lease["epoch"]
        self.fence = {"epoch": self.epoch, "worker_id": worker_id}
        self.num_steps = lease["num_steps"]
        self.start = lease.get("resume_step") or 0
        self.step = self.start
        self.durable = self.start
        self.fenced = False
        self.cancel = False
        self.checkpoint_s = 0.0
        self.checkpoints = 0
        self.step_end_ms: list[int] = []


async def _sleep_until(deadline: float, stopping: asyncio.Event, also: asyncio.Event | None = None) -> None:
    """Sleep until `deadline`, or until `stopping` (or `also`) is set."""
    left = deadline - time.monotonic()
    if left <= 0:
        return
    waits = [asyncio.ensure_future(e.wait()) for e in (stopping, also) if e is not None]
    try:
        await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


class SimWorker:
    """One simulated machine. With `on_notice` its preemption notice is announced there `notice_lead_s`
    before the end (the provider's job), and only `drain()` makes it checkpoint and release; without, it
    acts on its own notice at the moment it dies (the `spotreel simulate` model)."""

    def __init__(self, sh: Shared, worker_id: str, on_notice: Callable[[str], None] | None = None,
                 notice_lead_s: float = 0.0) -> None:
        self.sh = sh
        self.id = worker_id
        cfg = sh.cfg
        self.born = time.monotonic()
        self.dies_at = self.born + self._life(sh.mtbf_now_s)
        self.notice = sh.rng.random() < cfg.notice_share
        self.on_notice = on_notice
        self.notice_lead_s = notice_lead_s
        # acts on its own notice; under a provider the notice is the provider's and the drain does the work
        self.self_notice = self.notice and on_notice is None
        self.draining = asyncio.Event()
        self.busy = 0.0
        self.jobs_done = 0
        self.end = ""  # why live() returned: drained, died, stopped

    def _life(self, mtbf_s: float) -> float:
        return self.sh.rng.expovariate(1.0 / mtbf_s) if mtbf_s > 0 else float("inf")

    def redraw_life(self, mtbf_s: float) -> None:
        """A new exponential lifetime from now: the preemption rate changed (memoryless, so this is exact)."""
        if not self.dead():
            self.dies_at = time.monotonic() + self._life(mtbf_s)

    def dead(self) -> bool:
        return time.monotonic() >= self.dies_at

    def drain(self) -> None:
        """No new lease; a job in hand is checkpointed and released at the next step boundary."""
        self.draining.set()

    def _going(self) -> bool:
        return not self.dead() and not self.sh.stopping.is_set() and not self.draining.is_set()

    async def _announce_notice(self) -> None:
        await _sleep_until(self.dies_at - self.notice_lead_s, self.sh.stopping)
        if not self.sh.stopping.is_set() and self.on_notice is not None:
            self.on_notice(self.id)

    async def live(self) -> None:
        sh = self.sh
        announcer = (asyncio.create_task(self._announce_notice())
                     if self.notice and self.on_notice is not None and self.dies_at != float("inf") else None)
        cold_end = min(self.dies_at, self.born + sh.cfg.cold_start_s)
        await _sleep_until(cold_end, sh.stopping, self.draining)
        cold = time.monotonic() - self.born
        try:
            if self._going():
                await sh.call("register", f"/internal/workers/{self.id}/register",
                              {"gpu_type": sh.gpu_type, "models": [sh.model]})
            while self._going():
                wait = max(0.5, min(sh.cfg.lease_wait_s, self.dies_at - time.monotonic()))
                status, lease = await sh.call("lease", f"/internal/workers/{self.id}/lease",
                                              {"gpu_type": sh.gpu_type, "models": [sh.model], "wait_seconds": wait,
                                               "lease_ttl_ms": int(sh.cfg.lease_ttl_s * 1000)},
                                              timeout=wait + 30)
                if status == 200 and lease:
                    t0 = time.monotonic()
                    await self.run(_Job(lease, self.id))
                    self.busy += time.monotonic() - t0
                elif status != 204:
                    # The gateway is struggling: back off, no sooner than its Retry-After (a real worker's
                    # runtime does the same, worker/runtime.py _with_retry).
                    told = ((lease or {}).get("error") or {}).get("retry_after_s") or 0
                    back = time.monotonic() + max(1.0, told) + sh.rng.random()
                    await _sleep_until(min(self.dies_at, back), sh.stopping, self.draining)
        finally:
            if announcer is not None:
                announcer.cancel()
            self.end = "drained" if self.draining.is_set() else "died" if self.dead() else "stopped"
            end = min(time.monotonic(), self.dies_at)
            sh.lives.append(WorkerLife(self.id, max(0.0, end - self.born), cold, self.busy))

    async def run(self, job: _Job) -> None:
        sh, cfg = self.sh, self.sh.cfg
        reporter = asyncio.create_task(self._report(job))
        interval = sh.interval_s(job.lease)
        since_ckpt = 0.0
        partial = 0.0
        outcome = "completed"
        try:
            while job.step < job.num_steps:
                if sh.stopping.is_set():
                    outcome = "stopped"
                    break
                if job.fenced or job.cancel:
                    outcome = "fenced"
                    break
                if self.draining.is_set():
                    await self._hand_back(job)
                    outcome = "drained"
                    break
                step_end = time.monotonic() + cfg.step_s
                if step_end > self.dies_at:
                    await _sleep_until(self.dies_at, sh.stopping)
                    partial = max(0.0, cfg.step_s - (step_end - time.monotonic()))
                    outcome = await self._preempted(job)
                    break
                await asyncio.sleep(cfg.step_s)
                job.step += 1
                job.step_end_ms.append(int(time.time() * 1000))
                since_ckpt += cfg.step_s
                if interval is not None and since_ckpt >= interval - 1e-9 and job.step < job.num_steps:
                    await self._checkpoint(job)
                    since_ckpt = 0.0
            else:
                status, _ = await sh.call("complete", f"/internal/leases/{job.job_id}/complete",
                                          {**job.fence, "artifact_key": f"videos/{job.job_id}/e{job.epoch}.mp4",
                                           "artifact_checksum": "0" * 64, "artifact_size_bytes": 1})
                if status == 409:
                    outcome = "fenced"
                elif status in (200, 202):
                    self.jobs_done += 1
        finally:
            reporter.cancel()
            sh.attempts.append(Attempt(job.job_id, job.epoch, self.id, job.start, job.step - job.start,
                                       job.durable, partial, job.checkpoint_s, job.checkpoints, outcome,
                                       tuple(job.step_end_ms), job.leased_at_ms, interval,
                                       sh.mtbf_estimate_s(job.lease) if cfg.policy == "adaptive" else None))

    async def _preempted(self, job: _Job) -> str:
        if not self.self_notice:
            self.sh.vanished_at.append(time.time())
            return "vanished"
        await self._hand_back(job)
        return "notice"

    async def _hand_back(self, job: _Job) -> None:
        """Save what is finished, then release the lease so the job is requeued at once."""
        if job.step > job.durable:
            await self._checkpoint(job)
        await self.sh.call("release", f"/internal/leases/{job.job_id}/release", {**job.fence, "reason": "preempted"})

    async def _checkpoint(self, job: _Job) -> None:
        t0 = time.monotonic()
        await asyncio.sleep(self.sh.cfg.checkpoint_cost_s)  # writing latents + RNG state to S3
        step = job.step
        status, _ = await self.sh.call(
            "checkpoint", f"/internal/leases/{job.job_id}/checkpoint",
            {**job.fence, "checkpoint_key": f"ckpt/{job.job_id}/e{job.epoch}/s{step}.safetensors", "step": step,
             "progress_pct": 100.0 * step / job.num_steps, "checksum": "0" * 64, "size_bytes": 40_000})
        if status in (200, 202):
            job.durable = step
        elif status == 409:
            job.fenced = True
        job.checkpoint_s += time.monotonic() - t0
        job.checkpoints += 1

    async def _report(self, job: _Job) -> None:
        """Progress and heartbeats on their own clock, so a slow answer never stalls the steps. As the real
        worker (worker/pulse.py): an accepted progress report renews the lease, so a heartbeat goes out only
        when `heartbeat_s` passed without one."""
        cfg, sh = self.sh.cfg, self.sh
        now = time.monotonic()
        next_hb, next_pr = now + cfg.heartbeat_s, now + cfg.progress_s
        while True:
            await asyncio.sleep(max(0.0, min(next_hb, next_pr) - time.monotonic()))
            if self.dead() and not self.self_notice:
                return
            sent_at = time.monotonic()
            if time.monotonic() >= next_hb:
                next_hb += cfg.heartbeat_s
                status, body = await sh.call("heartbeat", f"/internal/leases/{job.job_id}/heartbeat", job.fence)
            else:
                next_pr += cfg.progress_s
                status, body = await sh.call(
                    "progress", f"/internal/leases/{job.job_id}/progress",
                    {**job.fence, "step": job.step, "progress_pct": 100.0 * job.step / job.num_steps})
                if status in (200, 202):
                    next_hb = time.monotonic() + cfg.heartbeat_s
            if status == 409:
                job.fenced = True
                return
            if status == 200 and body and body.get("cancel"):
                job.cancel = True
            if status in (200, 202) and body and body.get("renew_in_seconds"):
                # As the real worker (worker/pulse.py): the control plane is behind, both kinds wait.
                sh.meter.statuses["paced"] += 1
                quiet = sent_at + quiet_s(float(body["renew_in_seconds"]), int(cfg.lease_ttl_s * 1000))
                next_hb, next_pr = max(next_hb, quiet), max(next_pr, quiet)


class Fleet:
    """Keeps `target` machines alive; a machine that dies is replaced by a new worker."""

    def __init__(self, sh: Shared, run_id: str) -> None:
        self.sh = sh
        self.run_id = run_id
        self.target = 0
        self.made = 0
        self.tasks: set[asyncio.Task] = set()
        self.machines: dict[asyncio.Task, SimWorker] = {}

    def set_mtbf(self, mtbf_s: float) -> None:
        """The preemption rate changes: new machines and every living one die at the new rate from now."""
        if mtbf_s == self.sh.mtbf_now_s:
            return
        self.sh.mtbf_now_s = mtbf_s
        for w in self.machines.values():
            w.redraw_life(mtbf_s)

    def resize(self, target: int) -> None:
        self.target = target
        while len(self.tasks) < self.target:
            self._spawn()

    def _spawn(self) -> None:
        self.made += 1
        w = SimWorker(self.sh, f"sim-{self.run_id}-{self.made}")
        task = asyncio.create_task(w.live())
        self.tasks.add(task)
        self.machines[task] = w
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        self.machines.pop(task, None)
        if not self.sh.stopping.is_set() and len(self.tasks) < self.target:
            self._spawn()

    async def stop(self) -> None:
        self.sh.stopping.set()
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=120)


def arrival_offsets(cfg: SimConfig, span_s: float) -> Iterator[float]:
    """Seconds after the start at which a submission arrives, up to `span_s`: Poisson at each stage's rate.
    From their own seeded stream (the same one bench/peer_celery.py replays for Celery) and on a fixed
    schedule, so slow answers do not thin out the load."""
    arrivals = random.Random(cfg.seed)
    offset = 0.0
    while offset < span_s:
        stage = int(offset // cfg.stage_s)
        rate = cfg.stage_rate(stage)
        stage_end = (stage + 1) * cfg.stage_s if cfg.rate_by_stage else float("inf")
        gap = arrivals.expovariate(rate) if rate > 0 else float("inf")
        if offset + gap >= stage_end:
            offset = stage_end  # memoryless: the next stage's arrivals start at its own rate
            continue
        offset += gap
        if offset < span_s:
            yield offset


async def submit_loop(sh: Shared, until: float) -> None:
    """Submissions at `arrival_offsets`, tenants and tiers drawn by their shares, via POST /v1/videos."""
    cfg, rng = sh.cfg, sh.rng
    if max(cfg.rate_by_stage or (cfg.submit_rate,)) <= 0:
        return
    pending: set[asyncio.Task] = set()
    tenants, tw = zip(*cfg.tenants)
    tiers, pw = zip(*cfg.tiers)
    t0 = time.monotonic()
    for offset in arrival_offsets(cfg, until - t0):
        await asyncio.sleep(max(0.0, t0 + offset - time.monotonic()))
        tenant = rng.choices(tenants, tw)[0]
        tier = rng.choices(tiers, pw)[0]
        task = asyncio.create_task(_submit(sh, tenant, tier))
        pending.add(task)
        task.add_done_callback(pending.discard)
    if pending:
        await asyncio.wait(pending, timeout=60)


# A client refused with 429 or 503 comes back after the answer's Retry-After, as a product client would (the
# same Idempotency-Key makes it safe), up to this many refusals or this long in all; then it gives up.
SUBMIT_REFUSALS_MAX = 5
SUBMIT_RETRY_BUDGET_S = 60.0


async def _submit(sh: Shared, tenant: str, tier: int, sleep=asyncio.sleep) -> None:
    """One client's submission: errors (no answer, a 5xx without Retry-After) tried again 3 times at 0.5 s, a
    refusal (429, 503) after its Retry-After. `sh.refused` counts every refusal answer by its code, and the
    submissions given up: `gave_up` (refused too often) and `no_answer`."""
    body = {"prompt": f"simulated clip {uuid.uuid4().hex[:8]}", "model": sh.model, "gpu_type": sh.gpu_type,
            "num_steps": sh.cfg.steps, "priority": tier, "resolution": "64x64", "duration": 2.0}
    key = f"sim-{uuid.uuid4().hex}"
    errors = refusals = 0
    waited = 0.0
    while errors < 3:
        status, data = await sh.call("submit", "/v1/videos", body, key=sh.tenant_keys[tenant],
                                     headers={"Idempotency-Key": key})
        if status == 202 and data:
            sh.accepted.append(Accepted(data["job_id"], tenant, tier, int(time.time() * 1000)))
            return
        if status in (429, 503):
            error = (data or {}).get("error", {}) if isinstance(data, dict) else {}
            sh.refused[error.get("code", str(status))] += 1
            refusals += 1
            pause = float(error.get("retry_after_s") or 1) * (1 + 0.2 * sh.rng.random())  # spread the herd
            if refusals >= SUBMIT_REFUSALS_MAX or waited + pause > SUBMIT_RETRY_BUDGET_S or sh.stopping.is_set():
                sh.refused["gave_up"] += 1
                return
            waited += pause
            await sleep(pause)
            continue
        errors += 1
        await sleep(0.5)
    sh.refused["no_answer"] += 1
