"""Priority preemption: which running leases to ask back for higher-tier work waiting in a full pool.

Tiers alone only order a queue: a priority-9 job would wait behind a pool full of priority-1 work until one
of those finished. Checkpoint-and-release is cheap and resume is exact (the worker writes a checkpoint of
the step it is at, the next lease resumes bit for bit), so the scheduler may ask a lower-tier lease back
(PreemptLease -> PreemptRequested, leases.py) and the released GPU goes to the waiting work. Asked too
eagerly, that would thrash the pool, so every request is bounded by a budget:

- at most `per_minute` requests per pool in any rolling minute (`recent_ms`: the times of the pool's
  requests already made);
- never a lease younger than `min_run_ms` (it has barely loaded its model);
- never a job whose previous lease already ended this way (`preempted_last`): not twice in a row;
- never a job of equal or higher tier than the waiting work, nor one already asked to cancel, pause or yield.

`plan` is a pure function of the pool's demand and its running leases; the scheduler feeds it (from its
own partitions and the pool-stats records of the others) and sends the PreemptLease commands it returns.
Waiting work that a free worker or a lease already yielding will take needs no victim: the waiting jobs
are served highest tier first, so those highest tiers are discounted first.

**Fair-share preemption** (`plan_fair`, off unless a ratio is set): a tenant with queued work in the pool
and room under its ceiling, whose share (GPU-seconds / weight) is far below that of a tenant holding leases
there (the holder's share at least `ratio` times the waiting one's, and larger), gets one of that tenant's
leases asked back (reason `fair_share`): the most over-served holder's lowest tier, most recently started.
The same budget bounds it (shared with priority preemption), and the same eligibility (age, not asked, not
twice in a row); tiers are not compared, as dispatch does not compare them across tenants. The waiting
tenants furthest below their share are discounted first for the free workers and leases already yielding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from spotreel.domain.leases import FAIR_SHARE
from spotreel.domain.leases import PREEMPTED_FOR as FOR_TIER

MINUTE_MS = 60_000


@dataclass(frozen=True)
class Budget:
    per_minute: int = 2
    min_run_ms: int = 60_000


@dataclass(frozen=True)
class Running:
    """A held lease of the pool, as preemption sees it."""

    job_id: str
    epoch: int
    priority: int
    started_ms: int  # when this lease was granted
    asked: bool = False  # a cancel, pause or preemption was already asked of it
    preempted_last: bool = False  # the job's previous lease ended by preemption
    tenant: str = ""


@dataclass(frozen=True)
class Demand:
    """The pool's waiting work, over all partitions: queued jobs per priority, the workers that are free to
    take some of it now, and the leases already asked to yield (each frees a worker soon)."""

    waiting_by_tier: Mapping[int, int]
    free_workers: int = 0
    yielding: int = 0


@dataclass(frozen=True)
class Preemption:
    job_id: str
    epoch: int
    for_priority: int  # the waiting tier; -1 for a fair-share preemption
    reason: str = FOR_TIER
    for_tenant: str = ""  # the under-served tenant of a fair-share preemption


def room(recent_ms: Sequence[int], now_ms: int, budget: Budget) -> int:
    """Requests the budget still allows in the rolling minute ending at `now_ms`."""
    used = sum(1 for t in recent_ms if now_ms - MINUTE_MS < t <= now_ms)
    return max(0, budget.per_minute - used)


def may_yield(r: Running, now_ms: int, budget: Budget) -> bool:
    """Old enough, nothing asked of it yet, and its previous lease did not end by preemption."""
    return not r.asked and not r.preempted_last and now_ms - r.started_ms >= budget.min_run_ms


def eligible(r: Running, for_priority: int, now_ms: int, budget: Budget) -> bool:
    return r.priority < for_priority and may_yield(r, now_ms, budget)


def unserved(demand: Demand) -> list[int]:
    """The tiers of the waiting jobs that neither a free worker nor a yielding lease will take, highest first."""
    tiers = sorted((t for t, n in demand.waiting_by_tier.items() for _ in range(max(0, n))), reverse=True)
    return tiers[max(0, demand.free_workers) + max(0, demand.yielding):]


def plan(demand: Demand, running: Sequence[Running], recent_ms: Sequence[int], now_ms: int,
         budget: Budget) -> tuple[Preemption, ...]:
    """The leases to ask back now, at most one per unserved waiting job and within the budget. For each
    waiting job, highest tier first: the eligible lease of the lowest tier, the most recently started
    among those (it has the least sunk time; resume is exact either way), then by job id."""
    left = room(recent_ms, now_ms, budget)
    chosen: list[Preemption] = []
    taken: set[str] = set()
    for tier in unserved(demand):
        if len(chosen) >= left:
            break
        candidates = [r for r in running if r.job_id not in taken and eligible(r, tier, now_ms, budget)]
        if not candidates:
            break  # lower waiting tiers can only use a subset of these
        victim = min(candidates, key=lambda r: (r.priority, -r.started_ms, r.job_id))
        taken.add(victim.job_id)
        chosen.append(Preemption(victim.job_id, victim.epoch, tier))
    return tuple(chosen)


def plan_fair(waiting: Mapping[str, float], shares: Mapping[str, float], running: Sequence[Running], free_workers: int,
              yielding: int, recent_ms: Sequence[int], now_ms: int, budget: Budget,
              ratio: int, top_tier: Mapping[str, int] | None = None) -> tuple[Preemption, ...]:
    """`waiting`: tenant -> share, for the tenants with queued work in the pool and room under their ceiling;
    `shares`: the share of every tenant holding a lease in `running`. At most one lease per waiting tenant,
    within the budget; nothing when `ratio` < 1. `top_tier`: a waiting tenant's highest queued tier, where
    known: dispatch serves tiers first across tenants, so a lease of a higher tier would only go back to its
    own requeued job; such a lease is not taken for that tenant."""
    if ratio < 1:
        return ()
    left = room(recent_ms, now_ms, budget)
    order = sorted(waiting, key=lambda t: (waiting[t], t))[max(0, free_workers) + max(0, yielding):]
    chosen: list[Preemption] = []
    taken: set[str] = set()
    for tenant in order:
        if len(chosen) >= left:
            break
        mine = waiting[tenant]
        ceiling = (top_tier or {}).get(tenant)
        candidates = [r for r in running
                      if r.job_id not in taken and r.tenant != tenant and may_yield(r, now_ms, budget)
                      and shares.get(r.tenant, 0.0) > mine and shares.get(r.tenant, 0.0) >= ratio * mine
                      and (ceiling is None or r.priority <= ceiling)]
        if not candidates:
            continue
        victim = max(candidates, key=lambda r: (shares.get(r.tenant, 0.0), -r.priority, r.started_ms, r.job_id))
        taken.add(victim.job_id)
        chosen.append(Preemption(victim.job_id, victim.epoch, -1, FAIR_SHARE, tenant))
    return tuple(chosen)
