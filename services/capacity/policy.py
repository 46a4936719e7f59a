"""How many workers a pool should have, as a pure function of what the pool and the fleet look like.

No clock and no I/O: the manager passes `now_s` and the time of its last scale-up / scale-down in, so the
cooldown rules are testable by property. The rules, in order:

1. demand = busy workers + the workers needed to start the queue within `target_wait_s` (each worker gets
   through `target_wait_s / mean_run_s` jobs in that window; one job each while nothing is measured yet)
   + a warm idle buffer + spares for preemptions (the busy workers expected to be lost, at the pool's
   measured lease-loss rate, during one `cold_start_s`: their jobs come back to the queue before a
   replacement started then could take them), clamped to [floor, ceiling];
2. supply = live workers that are not draining, plus those still starting (a cold start counts as supply:
   otherwise every tick during a slow boot would add more);
3. scale up by at most `max_step_up` at a time, not within `up_cooldown_s` of the last scale-up;
4. scale down only idle workers (never one that holds a lease: draining a busy worker throws away work
   since its last checkpoint), not within `down_cooldown_s` of any scale action, and never below floor;
   while jobs are queued, as many idle workers as there are queued jobs are about to be leased one, so
   they are not surplus (draining one races its lease, and the job would be handed straight back).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class CapacityConfig:
    floor: int = 0
    ceiling: int = 4
    idle_buffer: int = 1
    target_wait_s: float = 120.0
    up_cooldown_s: float = 5.0
    down_cooldown_s: float = 60.0
    max_step_up: int = 8
    cold_start_s: float = 60.0  # how long a new worker takes to be ready: the horizon of preemption spares

    def __post_init__(self) -> None:
        if not 0 <= self.floor <= self.ceiling:
            raise ValueError(f"need 0 <= floor <= ceiling, got floor={self.floor} ceiling={self.ceiling}")
        if self.idle_buffer < 0 or self.max_step_up < 1:
            raise ValueError("idle_buffer must be >= 0 and max_step_up >= 1")
        if self.target_wait_s <= 0 or self.up_cooldown_s < 0 or self.down_cooldown_s < 0 or self.cold_start_s < 0:
            raise ValueError("target_wait_s must be > 0, cooldowns and cold_start_s >= 0")


@dataclass(frozen=True)
class PoolView:
    """The pool's statistics summed over the scheduler's partitions."""

    pool: str
    queued: int = 0
    leased: int = 0
    oldest_wait_ms: int = 0
    mean_run_ms: float = 0.0
    loss_rate_per_hour: float = 0.0  # leases lost to preemption per hour of leased time (1 / MTBF in hours)


@dataclass(frozen=True)
class FleetView:
    """What the provider runs for the pool: worker ids by condition."""

    idle: tuple[str, ...] = ()
    busy: tuple[str, ...] = ()
    starting: tuple[str, ...] = ()
    draining: tuple[str, ...] = ()

    @property
    def supply(self) -> int:
        return len(self.idle) + len(self.busy) + len(self.starting)


@dataclass(frozen=True)
class Decision:
    add: int = 0
    drain: tuple[str, ...] = ()
    want: int = 0
    reason: str = "steady"


def preemption_spares(view: PoolView, cfg: CapacityConfig) -> int:
    """Busy workers expected to be preempted while a replacement boots, rounded to the nearest whole one
    (a spare only once half a loss is expected, so a rare preemption does not cost an idle worker)."""
    expected = view.leased * max(0.0, view.loss_rate_per_hour) * cfg.cold_start_s / 3600.0
    return math.floor(expected + 0.5)


def demand(view: PoolView, cfg: CapacityConfig) -> int:
    if view.queued > 0 and view.mean_run_ms > 0:
        per_worker = max(1, math.floor(cfg.target_wait_s * 1000 / view.mean_run_ms))
        for_queue = math.ceil(view.queued / per_worker)
    else:
        for_queue = view.queued
    want = view.leased + for_queue + cfg.idle_buffer + preemption_spares(view, cfg)
    return max(cfg.floor, min(cfg.ceiling, want))


def decide(view: PoolView, fleet: FleetView, cfg: CapacityConfig, now_s: float,
           last_up_s: float | None, last_down_s: float | None) -> Decision:
    want = demand(view, cfg)
    have = fleet.supply
    if want > have:
        if last_up_s is not None and now_s - last_up_s < cfg.up_cooldown_s:
            return Decision(want=want, reason="scale-up cooling down")
        return Decision(add=min(want - have, cfg.max_step_up), want=want,
                        reason=f"demand {want} > supply {have} (queued {view.queued}, busy {view.leased})")
    if want < have:
        last = max((t for t in (last_up_s, last_down_s) if t is not None), default=None)
        if last is not None and now_s - last < cfg.down_cooldown_s:
            return Decision(want=want, reason="scale-down cooling down")
        # want >= floor, so draining the surplus never goes below the floor. Newest idle first: the
        # oldest ones have the warmest caches.
        spare = max(0, len(fleet.idle) - view.queued)
        drain = tuple(reversed(fleet.idle))[:min(have - want, spare)]
        if not drain:
            return Decision(want=want, reason="surplus is busy or about to be; waiting for it to go idle")
        return Decision(drain=drain, want=want, reason=f"supply {have} > demand {want}")
    return Decision(want=want)
