"""What a fleet simulation runs: fleet size and ramp, job shape, preemptions, load, and prices.

Parsed from the `spotreel simulate` command line; every refusal says which option is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def parse_shares(text: str, what: str, key=str) -> tuple[tuple, ...]:
    """'a:3,b:1' -> (('a', 0.75), ('b', 0.25)); a name without ':w' weighs 1."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, _, weight = part.partition(":")
        try:
            value = key(name.strip())
            w = float(weight) if weight else 1.0
        except ValueError:
            raise ValueError(f"{what}: cannot read {part!r} (use NAME:WEIGHT,NAME:WEIGHT)") from None
        if w <= 0:
            raise ValueError(f"{what}: weight of {name!r} must be positive")
        out.append((value, w))
    if not out:
        raise ValueError(f"{what}: give at least one entry")
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise ValueError(f"{what}: an entry is given twice")
    total = sum(w for _, w in out)
    return tuple((n, w / total) for n, w in out)


def parse_ramp(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--workers: expected counts separated by commas, got {text!r}") from None
    if not sizes or any(n < 1 for n in sizes):
        raise ValueError("--workers: every fleet size must be at least 1")
    return sizes


def parse_policy(text: str) -> tuple[str, float | None]:
    """none | fixed:SECONDS | adaptive."""
    if text in ("none", "adaptive"):
        return text, None
    kind, _, secs = text.partition(":")
    if kind == "fixed":
        try:
            value = float(secs)
        except ValueError:
            value = -1.0
        if value > 0:
            return "fixed", value
    raise ValueError(f"--checkpoint-policy: use none, adaptive or fixed:SECONDS, got {text!r}")


def parse_mtbf(text: str) -> tuple[float, tuple[float, ...]]:
    """'600' -> (600, ()); '600,60' -> (600, (600, 60)): the machines' MTBF, one value or one per stage."""
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--mtbf: expected seconds separated by commas, got {text!r}") from None
    if not values:
        raise ValueError("--mtbf: give at least one value")
    return values[0], (values if len(values) > 1 else ())


def parse_rate(text: str) -> tuple[float, tuple[float, ...]]:
    """'20' -> (20, ()); '5,10,20' -> (5, (5, 10, 20)): submissions per second, one value or one per stage
    (a ramp whose demand grows with its fleet: more workers at one rate only add idle pollers)."""
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--rate: expected submissions per second separated by commas, got {text!r}") from None
    if not values:
        raise ValueError("--rate: give at least one value")
    return values[0], (values if len(values) > 1 else ())


def parse_stall(text: str, target: str = "scheduler") -> dict[str, Any]:
    """'' -> no stall; 'AT:SECONDS' -> the stall_at_s / stall_s / stall_target fields of SimConfig."""
    if not text:
        return {}
    at, _, secs = text.partition(":")
    try:
        return {"stall_at_s": float(at), "stall_s": float(secs), "stall_target": target}
    except ValueError:
        raise ValueError(f"--stall-{target}: use AT:SECONDS (e.g. 20:35), got {text!r}") from None


@dataclass(frozen=True)
class SimConfig:
    workers: tuple[int, ...] = (250,)       # fleet size per stage (a ramp when several)
    stage_s: float = 60.0                   # seconds per ramp stage
    drain_s: float = 120.0                  # after the last stage: no new submissions, wait for jobs to end
    submit_rate: float = 2.0                # submissions per second, all tenants together (Poisson)
    rate_by_stage: tuple[float, ...] = ()   # one rate per ramp stage (--rate A,B,...); empty: submit_rate always
    tenants: tuple[tuple[str, float], ...] = (("acme", 0.5), ("globex", 0.3), ("initech", 0.2))
    tiers: tuple[tuple[int, float], ...] = ((0, 0.6), (5, 0.3), (9, 0.1))
    steps: int = 20
    step_s: float = 1.0
    checkpoint_cost_s: float = 0.5
    policy: str = "adaptive"
    fixed_interval_s: float | None = None
    interval_bounds_s: tuple[float, float] = (2.0, 600.0)
    mtbf_s: float = 600.0                   # per worker; 0 = no preemptions
    # A changing preemption rate: the machines' MTBF in each ramp stage (one per stage); empty: mtbf_s always.
    mtbf_by_stage_s: tuple[float, ...] = ()
    # The adaptive policy's prior (the worker's --mtbf; 0: the first stage's true MTBF) and its weight in
    # losses (--mtbf-prior-losses); the pool's measured lease losses, on every lease answer, move it.
    mtbf_prior_s: float = 0.0
    mtbf_prior_losses: float = 1.0
    notice_share: float = 0.5
    cold_start_s: float = 5.0
    heartbeat_s: float = 10.0
    progress_s: float = 5.0
    lease_wait_s: float = 20.0
    lease_ttl_s: float = 30.0               # the TTL each simulated worker asks for on its lease request
    price_per_gpu_hour: float = 2.50
    seed: int = 1
    # The control plane falling behind on purpose: the scheduler (or the gateway: `stall_target`) is frozen
    # (SIGSTOP) `stall_s` seconds from `stall_at_s` after the start, while the fleet keeps renewing. 0: no stall.
    stall_at_s: float = 0.0
    stall_s: float = 0.0
    stall_target: str = "scheduler"
    # How the workers reach the scheduler: "http" (the gateway's worker API) or "kafka" (the topics directly,
    # as internal pools do). Submissions always go through the public HTTP API.
    transport: str = "http"

    def __post_init__(self) -> None:
        checks = [
            (self.stage_s > 0, "--stage-seconds must be positive"),
            (self.drain_s >= 0, "--drain-seconds must not be negative"),
            (self.submit_rate >= 0 and all(r >= 0 for r in self.rate_by_stage), "--rate must not be negative"),
            (len(self.rate_by_stage) in (0, len(self.workers)), "--rate: one value, or one per stage of --workers"),
            (self.steps >= 1, "--steps must be at least 1"),
            (self.step_s > 0, "--step-seconds must be positive"),
            (self.checkpoint_cost_s >= 0, "--checkpoint-seconds must not be negative"),
            (self.mtbf_s >= 0, "--mtbf must not be negative (0: no preemptions)"),
            (all(m >= 0 for m in self.mtbf_by_stage_s), "--mtbf must not be negative (0: no preemptions)"),
            (len(self.mtbf_by_stage_s) in (0, len(self.workers)), "--mtbf: one value, or one per stage of --workers"),
            (self.mtbf_prior_s >= 0 and self.mtbf_prior_losses > 0,
             "--mtbf-prior must not be negative and --mtbf-prior-losses must be positive"),
            (0.0 <= self.notice_share <= 1.0, "--notice-share must be within [0, 1]"),
            (self.cold_start_s >= 0, "--cold-start must not be negative"),
            (self.heartbeat_s > 0 and self.progress_s > 0, "heartbeat and progress periods must be positive"),
            (0 < self.lease_wait_s <= 60, "--lease-wait must be within (0, 60]"),
            (self.lease_ttl_s >= 3 * min(self.heartbeat_s, self.progress_s),
             "--lease-ttl must be at least three renewal periods (the shorter of heartbeat and progress)"),
            (self.price_per_gpu_hour >= 0, "--price must not be negative"),
            (self.stall_s >= 0 and self.stall_at_s >= 0, f"--stall-{self.stall_target}: AT:SECONDS, both >= 0"),
            (self.stall_target in ("scheduler", "gateway"), "the stall target is the scheduler or the gateway"),
            (self.transport in ("http", "kafka"), "--transport must be http or kafka"),
            (all(0 <= t <= 9 for t, _ in self.tiers), "--tiers: priorities are 0..9"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    def stage_mtbf_s(self, stage: int) -> float:
        """The machines' true MTBF during ramp stage `stage` (0-based; 0: no preemptions)."""
        return self.mtbf_by_stage_s[stage] if self.mtbf_by_stage_s else self.mtbf_s

    def stage_rate(self, stage: int) -> float:
        """Submissions per second during ramp stage `stage` (0-based)."""
        return self.rate_by_stage[min(stage, len(self.rate_by_stage) - 1)] if self.rate_by_stage else self.submit_rate

    @property
    def prior_mtbf_s(self) -> float:
        """What the workers assume before the pool has measured anything."""
        first = self.stage_mtbf_s(0)
        return self.mtbf_prior_s or (first if first > 0 else 1e9)

    @property
    def run_s(self) -> float:
        return self.stage_s * len(self.workers)
