"""The figures of a fleet simulation, from what clients and workers saw and from the scheduler's events.

Pure: lists in, a dict out. The events are the judge of correctness (a job with two JobSucceeded is a
duplicate; an accepted job that never reached a terminal event is lost); the workers' own records give the
GPU-second accounting, which no event carries.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable

TERMINAL = frozenset({"JobSucceeded", "JobFailed", "JobDeadLettered", "JobCancelled"})
READY = frozenset({"JobQueued", "JobRequeued"})


@dataclass(frozen=True)
class Accepted:
    """A 202 the simulated client got."""

    job_id: str
    tenant: str
    tier: int
    at_ms: int


@dataclass(frozen=True)
class Attempt:
    """One lease as a simulated worker lived it. `outcome`: completed, notice (checkpoint + release),
    drained (the same, because the capacity manager drained it), vanished (no notice: the lease expires),
    fenced (a 409 told it the lease was gone), stopped (run end)."""

    job_id: str
    epoch: int
    worker_id: str
    start_step: int
    steps_done: int       # steps computed in this attempt
    durable_step: int     # the last step a checkpoint of this attempt made durable (or start_step)
    partial_s: float      # time spent on a step that was cut short
    checkpoint_s: float   # time spent writing checkpoints (incl. the emergency one)
    checkpoints: int
    outcome: str
    step_end_ms: tuple[int, ...] = ()  # wall time each computed step ended, in order (for goodput by stage)
    leased_at_ms: int = 0                 # wall time the lease reached the worker
    interval_s: float | None = None       # the checkpoint interval it ran with (None: no checkpoints)
    mtbf_estimate_s: float | None = None  # the adaptive policy's MTBF at that lease (prior + pool's losses)


@dataclass(frozen=True)
class WorkerLife:
    worker_id: str
    billed_s: float       # from the request for a machine to its end (cold start included)
    cold_s: float
    busy_s: float         # holding a lease


def percentile(values: Iterable[float], q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 100]); None for no values."""
    data = sorted(values)
    if not data:
        return None
    if not 0 <= q <= 100:
        raise ValueError("q must be within [0, 100]")
    rank = max(1, math.ceil(q / 100 * len(data)))
    return data[rank - 1]


def summary_ms(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "p50_ms": percentile(values, 50), "p99_ms": percentile(values, 99),
            "max_ms": max(values) if values else None}


def event_name(event: Any) -> str:
    return type(event).__name__


def judge_events(accepted: list[Accepted], events: list[Any]) -> dict[str, Any]:
    """Completed, lost, duplicated, dispatch latency and queue waits, from the events of the run."""
    by_job: dict[str, list[Any]] = defaultdict(list)
    for e in events:
        job_id = getattr(e, "job_id", None)
        if job_id is not None:
            by_job[job_id].append(e)
    dispatch: list[float] = []
    wait_tier: dict[str, list[float]] = defaultdict(list)
    wait_tenant: dict[str, list[float]] = defaultdict(list)
    counts: dict[str, int] = defaultdict(int)
    duplicated, lost, never_seen = [], [], []
    last_status: dict[str, int] = defaultdict(int)
    last_end = 0
    for job in accepted:
        evs = sorted(by_job.get(job.job_id, []), key=lambda e: getattr(e, "version", 0))
        names = [event_name(e) for e in evs]
        if not evs:
            never_seen.append(job.job_id)
        if names.count("JobSucceeded") >= 2:
            duplicated.append(job.job_id)
        terminal = [n for n in names if n in TERMINAL]
        if terminal:
            counts[terminal[0]] += 1
            last_end = max(last_end, next(e.at_ms for e in evs if event_name(e) in TERMINAL))
        else:
            lost.append(job.job_id)
            last_status[names[-1] if names else "none"] += 1
        counts["leases"] += names.count("JobLeased")
        counts["lease_expired"] += names.count("LeaseExpired")
        counts["lease_released"] += names.count("LeaseReleased")
        counts["rejected_commands"] += names.count("CommandRejected")
        ready_at: int | None = None
        first_lease: int | None = None
        for e in evs:
            n = event_name(e)
            if n in READY:
                ready_at = e.at_ms
            elif n == "JobLeased":
                if ready_at is not None:
                    dispatch.append(float(e.at_ms - ready_at))
                    ready_at = None
                if first_lease is None:
                    first_lease = e.at_ms
        if first_lease is not None:
            wait = float(max(0, first_lease - job.at_ms))
            wait_tier[str(job.tier)].append(wait)
            wait_tenant[job.tenant].append(wait)
    return {
        "accepted": len(accepted),
        "completed": counts["JobSucceeded"],
        "failed": counts["JobFailed"], "dead_lettered": counts["JobDeadLettered"],
        "cancelled": counts["JobCancelled"],
        "lost": len(lost), "lost_by_last_event": dict(last_status), "never_seen_by_scheduler": len(never_seen),
        "duplicated": len(duplicated), "duplicated_jobs": duplicated[:20], "lost_jobs": lost[:20],
        "leases": counts["leases"], "lease_expired": counts["lease_expired"],
        "lease_released": counts["lease_released"], "rejected_commands": counts["rejected_commands"],
        "dispatch_latency": summary_ms(dispatch),
        # first 202 to the last terminal event: the span the throughput is measured over
        "makespan_s": (last_end - min(a.at_ms for a in accepted)) / 1000 if last_end and accepted else None,
        "queue_wait_by_tier": {k: summary_ms(v) for k, v in sorted(wait_tier.items())},
        "queue_wait_by_tenant": {k: summary_ms(v) for k, v in sorted(wait_tenant.items())},
    }


def gpu_accounting(attempts: list[Attempt], lives: list[WorkerLife], step_s: float,
                   price_per_gpu_hour: float, completed: int) -> dict[str, Any]:
    """Where the GPU-seconds went. Wasted = steps computed after the attempt's last durable checkpoint by
    attempts that did not complete (they are computed again by the next attempt) + steps cut short."""
    lost_steps = 0
    partial = 0.0
    ckpt = 0.0
    computed = 0
    outcomes: dict[str, int] = defaultdict(int)
    for a in attempts:
        outcomes[a.outcome] += 1
        computed += a.steps_done
        partial += a.partial_s
        ckpt += a.checkpoint_s
        if a.outcome in ("vanished", "fenced"):
            lost_steps += max(0, a.start_step + a.steps_done - a.durable_step)
    billed = sum(w.billed_s for w in lives)
    cold = sum(w.cold_s for w in lives)
    busy = sum(w.busy_s for w in lives)
    wasted = lost_steps * step_s + partial
    cost = billed / 3600.0 * price_per_gpu_hour
    return {
        "attempts_by_outcome": dict(outcomes),
        "gpu_seconds_billed": billed, "gpu_seconds_cold_start": cold, "gpu_seconds_leased": busy,
        "gpu_seconds_idle": max(0.0, billed - cold - busy),
        "gpu_seconds_computing": computed * step_s,
        "wasted_gpu_seconds": wasted, "lost_steps": lost_steps,
        "checkpoint_overhead_gpu_seconds": ckpt,
        "checkpoint_overhead_share_of_compute": ckpt / (computed * step_s) if computed else None,
        "price_per_gpu_hour_usd": price_per_gpu_hour,
        "estimated_cost_usd": cost,
        "cost_per_completed_usd": cost / completed if completed else None,
    }


def kept_step_times(a: Attempt) -> tuple[int, ...]:
    """The end times of the steps of `a` that no later attempt computes again: all of them when the attempt
    completed or handed its work back with a checkpoint (notice, drained), only those up to its last durable
    checkpoint otherwise (vanished, fenced, stopped at the run's end)."""
    if a.outcome in ("completed", "notice", "drained"):
        return a.step_end_ms
    return a.step_end_ms[:max(0, a.durable_step - a.start_step)]


def goodput_by_stage(attempts: list[Attempt], stages: list[dict[str, Any]], step_s: float) -> list[float]:
    """Goodput of each stage: GPU-seconds of kept steps (see `kept_step_times`) that ended within the stage's
    [from_ms, to_ms), per second of the stage. Work redone after a lost lease does not count, so a control
    plane that costs live workers their leases shows here as lost goodput, not as extra work."""
    ends = sorted(t for a in attempts for t in kept_step_times(a))
    out = []
    for st in stages:
        lo, hi = st["from_ms"], st["to_ms"]
        n = sum(1 for t in ends if lo <= t < hi)
        out.append(n * step_s / max(1e-9, (hi - lo) / 1000))
    return out


def goodput_hold(goodput: list[float]) -> float | None:
    """The lowest goodput of the stages from the best one on, as a share of the best (1.0: adding load never
    cost goodput; the issue's bar is >= 0.9). None without a stage that did any work."""
    if not goodput or max(goodput) <= 0:
        return None
    best = goodput.index(max(goodput))
    return min(goodput[best:]) / goodput[best]


def interval_by_stage(attempts: list[Attempt], stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per stage: the leases that reached workers in it, the median MTBF the workers estimated at those
    leases and the median checkpoint interval they ran with, the leases lost (vanished or handed back at a
    notice) and the GPU-seconds spent writing checkpoints, so the interval can be read against the
    stage's true preemption rate."""
    out = []
    for st in stages:
        lo, hi = st["from_ms"], st["to_ms"]
        mine = [a for a in attempts if lo <= a.leased_at_ms < hi]
        est = [a.mtbf_estimate_s for a in mine if a.mtbf_estimate_s is not None]
        ivs = [a.interval_s for a in mine if a.interval_s is not None]
        out.append({"leases": len(mine), "mtbf_estimate_p50_s": percentile(est, 50),
                    "interval_p50_s": percentile(ivs, 50), "interval_min_s": min(ivs, default=None),
                    "interval_max_s": max(ivs, default=None),
                    "lost_leases": sum(1 for a in mine if a.outcome in ("vanished", "notice")),
                    "checkpoints": sum(a.checkpoints for a in mine),
                    "checkpoint_gpu_s": round(sum(a.checkpoint_s for a in mine), 1)})
    return out


def saturated(stage: dict[str, Any], cores: int, lease_ttl_s: float) -> list[str]:
    """Why a ramp stage counts as saturated (empty list: it kept up). A stage is saturated when a service
    process uses ~a whole core (Python runs one thread of work), the stack's processes fill the cores,
    requests fail,
    or heartbeats come back so slowly that leases are at risk."""
    why = []
    for name, share in stage.get("cpu_cores", {}).items():
        if name != "simulator" and share >= 0.9:
            why.append(f"{name} uses {share:.2f} cores")
    # The stack's own processes, not the machine's total: on a shared machine others' work is not ours.
    ours = sum(stage.get("cpu_cores", {}).values())
    if ours >= 0.9 * cores:
        why.append(f"the stack uses {ours:.2f} of {cores} cores")
    requests = stage.get("requests", 0)
    errors = stage.get("request_errors", 0)
    if requests and errors / requests > 0.01:
        why.append(f"{errors} of {requests} worker requests failed")
    hb = stage.get("heartbeat_rtt", {}).get("p99_ms")
    if hb is not None and hb > lease_ttl_s * 1000 / 3:
        why.append(f"lease renewal (heartbeat/progress) p99 {hb:.0f} ms (lease {lease_ttl_s:.0f} s)")
    if stage.get("lease_expired", 0) > stage.get("vanished", 0):
        why.append("more leases expired than workers vanished")
    if stage.get("lease_expired_under_live_workers", 0):
        why.append(f"{stage['lease_expired_under_live_workers']} leases expired under workers that had not vanished")
    return why
