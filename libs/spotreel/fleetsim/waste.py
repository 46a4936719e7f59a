"""What preemptions cost a job, in GPU-seconds: the exact expectation and a seeded Monte-Carlo.

The job model, shared by both so that they can be compared:
- the job needs `work_s` of compute, made of steps of `step_s`; a checkpoint can only be taken between steps
  and costs `checkpoint_cost_s`; the last segment ends with the job's completion, not a checkpoint;
- preemptions arrive as a Poisson process of mean spacing `mtbf_s` (in machine time, so they can also hit
  during a checkpoint or a restart);
- a preemption without notice loses everything since the last durable checkpoint; the job then pays
  `restart_s` (cold start + checkpoint load) on a fresh machine before computing again;
- a preemption with notice writes an emergency checkpoint first (it costs `checkpoint_cost_s` and keeps
  every finished step), then pays the same restart.

Expected time for one segment of length L followed by restarts of length R on failure, for exponential
failures (Daly 2006): E = M·e^(R/M)·(e^(L/M) − 1). Summed over the segments it gives the expected wall time
of the job; waste = that − work. It is exact for preemptions without notice, so the tests hold the
Monte-Carlo to it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class JobModel:
    work_s: float
    step_s: float
    checkpoint_cost_s: float
    restart_s: float

    def __post_init__(self) -> None:
        if self.work_s <= 0 or self.step_s <= 0:
            raise ValueError("work_s and step_s must be positive")
        if self.checkpoint_cost_s < 0 or self.restart_s < 0:
            raise ValueError("checkpoint_cost_s and restart_s must not be negative")

    @property
    def steps(self) -> int:
        return max(1, math.ceil(self.work_s / self.step_s - 1e-9))


def interval_steps(model: JobModel, interval_s: float | None) -> int | None:
    """A checkpoint interval in whole steps: the first step boundary at or after the interval, as a worker
    that checks its clock after each step does. None means never checkpoint."""
    if interval_s is None:
        return None
    if interval_s <= 0:
        raise ValueError("a checkpoint interval must be positive (None: no checkpoints)")
    return max(1, math.ceil(interval_s / model.step_s - 1e-9))


def segments(model: JobModel, interval_s: float | None) -> list[float]:
    """Segment lengths in seconds: each full segment includes its checkpoint; the last one has none."""
    every = interval_steps(model, interval_s)
    n = model.steps
    if every is None or every >= n:
        return [n * model.step_s]
    full, rest = divmod(n, every)
    out = [every * model.step_s + model.checkpoint_cost_s] * full
    if rest:
        out.append(rest * model.step_s)
    else:  # the final segment completes the job: its checkpoint is never written
        out[-1] -= model.checkpoint_cost_s
    return out


def expected_wall_s(model: JobModel, interval_s: float | None, mtbf_s: float) -> float:
    """Expected wall time (= GPU-seconds billed to this job) with preemptions without notice."""
    if mtbf_s <= 0:
        raise ValueError("mtbf_s must be positive")
    m, r = mtbf_s, model.restart_s
    total = 0.0
    for length in segments(model, interval_s):
        # expm1 keeps precision when L << M (rare preemptions), where e^(L/M) − 1 would cancel.
        total += m * math.exp(r / m) * math.expm1(length / m)
    return total


def expected_waste_s(model: JobModel, interval_s: float | None, mtbf_s: float) -> float:
    return expected_wall_s(model, interval_s, mtbf_s) - model.steps * model.step_s


def young_daly_interval_s(checkpoint_cost_s: float, mtbf_s: float, lo: float, hi: float) -> float:
    """sqrt(2·C·MTBF), clamped to [lo, hi]. A private copy until worker/interval.py provides it."""
    if checkpoint_cost_s < 0 or mtbf_s <= 0:
        raise ValueError("checkpoint cost must be >= 0 and MTBF > 0")
    if lo <= 0 or hi < lo:
        raise ValueError("bounds must satisfy 0 < lo <= hi")
    return min(hi, max(lo, math.sqrt(2.0 * checkpoint_cost_s * mtbf_s)))


def adaptive_interval_s(checkpoint_cost_s: float, mtbf_s: float, lo: float, hi: float) -> float:
    """The worker's own function when it exists, else the private copy above (same contract)."""
    try:
        from spotreel.domain.checkpoint_interval import optimal_interval_s
    except ImportError:
        return young_daly_interval_s(checkpoint_cost_s, mtbf_s, lo, hi)
    return float(optimal_interval_s(checkpoint_cost_s, mtbf_s, lo, hi))


def optimal_interval_by_formula(model: JobModel, mtbf_s: float) -> tuple[int | None, float]:
    """The step interval that minimises the expected waste (exhaustive over whole steps, never included)."""
    best: tuple[int | None, float] = (None, expected_waste_s(model, None, mtbf_s))
    for every in range(1, model.steps):
        waste = expected_waste_s(model, every * model.step_s, mtbf_s)
        if waste < best[1]:
            best = (every, waste)
    return best


# -- Monte-Carlo -----------------------------------------------------------------------------------------

@dataclass
class WasteTally:
    """GPU-seconds of one or more simulated jobs, split by where they went."""

    jobs: int = 0
    wall_s: float = 0.0
    useful_s: float = 0.0
    lost_work_s: float = 0.0
    checkpoint_s: float = 0.0
    restart_s: float = 0.0
    preemptions: int = 0
    per_job_waste: list[float] = field(default_factory=list)

    @property
    def waste_s(self) -> float:
        return self.wall_s - self.useful_s

    def mean_waste_s(self) -> float:
        return self.waste_s / self.jobs if self.jobs else 0.0

    def ci95_s(self) -> float:
        """Half-width of the normal 95% interval of the mean waste per job."""
        n = len(self.per_job_waste)
        if n < 2:
            return 0.0
        mean = sum(self.per_job_waste) / n
        var = sum((w - mean) ** 2 for w in self.per_job_waste) / (n - 1)
        return 1.96 * math.sqrt(var / n)


def simulate_job(model: JobModel, interval_s: float | None, mtbf_s: float, notice_share: float,
                 rng: random.Random, tally: WasteTally) -> None:
    """Run one job to completion under random preemptions and add its GPU-seconds to `tally`."""
    if not 0.0 <= notice_share <= 1.0:
        raise ValueError("notice_share must be within [0, 1]")
    every = interval_steps(model, interval_s)
    n, step, c = model.steps, model.step_s, model.checkpoint_cost_s
    done = 0          # durable steps
    wall = 0.0
    restarting = False
    start_waste = tally.waste_s
    next_failure = rng.expovariate(1.0 / mtbf_s)
    clock = 0.0       # machine time since the last preemption
    while done < n:
        # One attempt: optional restart, then steps with checkpoints, until done or preempted.
        plan: list[tuple[str, float]] = []
        if restarting:
            plan.append(("restart", model.restart_s))
        s = done
        while s < n:
            plan.append(("step", step))
            s += 1
            if every is not None and s < n and (s - done) % every == 0:
                plan.append(("checkpoint", c))
        since_ckpt = 0
        preempted = False
        for kind, length in plan:
            if clock + length > next_failure:
                spent = next_failure - clock
                wall += spent
                preempted = True
                tally.preemptions += 1
                if kind == "restart":
                    tally.restart_s += spent
                elif kind == "checkpoint":
                    tally.checkpoint_s += spent
                else:
                    tally.lost_work_s += spent
                if kind != "restart" and rng.random() < notice_share:
                    # Notice: an emergency checkpoint saves the finished steps (only the step or checkpoint
                    # under way is lost). Its cost is paid on the old machine, before it goes away.
                    done += since_ckpt
                    wall += c
                    tally.checkpoint_s += c
                    since_ckpt = 0
                tally.lost_work_s += since_ckpt * step
                break
            clock += length
            wall += length
            if kind == "restart":
                tally.restart_s += length
            elif kind == "checkpoint":
                tally.checkpoint_s += length
                done += since_ckpt
                since_ckpt = 0
            else:
                since_ckpt += 1
        if not preempted:
            done += since_ckpt
            break
        restarting = True
        clock = 0.0
        next_failure = rng.expovariate(1.0 / mtbf_s)
    tally.jobs += 1
    tally.wall_s += wall
    tally.useful_s += n * step
    tally.per_job_waste.append(tally.waste_s - start_waste)


def monte_carlo(model: JobModel, interval_s: float | None, mtbf_s: float, *, jobs: int, seed: int,
                notice_share: float = 0.0) -> WasteTally:
    if jobs < 1:
        raise ValueError("jobs must be at least 1")
    rng = random.Random(seed)
    tally = WasteTally()
    for _ in range(jobs):
        simulate_job(model, interval_s, mtbf_s, notice_share, rng, tally)
    return tally
