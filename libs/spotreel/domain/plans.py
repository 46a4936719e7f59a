"""Tenant plans: what a tenant may use, as one named bundle an operator can switch at runtime.

A plan sets four things, each of which one component enforces:

* ``weight`` - the tenant's fair-share weight (``fairness``; the scheduler's dispatch, across partitions);
* ``max_in_flight`` - the ceiling on the tenant's concurrent leases, i.e. GPUs, one per job (the scheduler's
  dispatch; the gateway also caps unfinished jobs at a multiple of it);
* ``rate_per_minute`` - submissions per minute (the gateway's token bucket, ``quotas``);
* ``max_priority`` - the highest priority tier the tenant may ask for (the gateway: submit and PATCH).

A tenant's settings are its plan's values with any explicit override on top (``settings_for``).
``CUSTOM`` is what a tenant made without a plan has: today's defaults, every tier allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from spotreel.domain.fairness import TenantPolicy

MAX_TIER = 9


@dataclass(frozen=True)
class Plan:
    name: str
    weight: float
    max_in_flight: int | None
    rate_per_minute: int
    max_priority: int

    def __post_init__(self) -> None:
        problem = plan_problem(self.weight, self.max_in_flight, self.rate_per_minute, self.max_priority)
        if problem is not None:
            raise ValueError(problem)


def plan_problem(weight: float, max_in_flight: int | None, rate_per_minute: int, max_priority: int) -> str | None:
    """Why these settings are not allowed, or None."""
    if not weight > 0:
        return f"weight must be positive, got {weight}"
    if max_in_flight is not None and max_in_flight < 0:
        return f"max_in_flight must be >= 0, got {max_in_flight}"
    if rate_per_minute < 1:
        return f"rate_per_minute must be >= 1, got {rate_per_minute}"
    if not 0 <= max_priority <= MAX_TIER:
        return f"max_priority must be between 0 and {MAX_TIER}, got {max_priority}"
    return None


CUSTOM = Plan("custom", weight=1.0, max_in_flight=100, rate_per_minute=600, max_priority=MAX_TIER)
PLANS: dict[str, Plan] = {
    "free": Plan("free", weight=1.0, max_in_flight=2, rate_per_minute=30, max_priority=4),
    "pro": Plan("pro", weight=3.0, max_in_flight=20, rate_per_minute=600, max_priority=7),
    "enterprise": Plan("enterprise", weight=10.0, max_in_flight=200, rate_per_minute=6000, max_priority=MAX_TIER),
}


def settings_for(plan: str | None, *, weight: float | None = None, max_in_flight: int | None = None,
                 rate_per_minute: int | None = None, max_priority: int | None = None) -> Plan:
    """The plan's values (``CUSTOM`` without one) with the given overrides; raises ValueError for an unknown
    plan or settings out of range. The result keeps the plan's name."""
    base = CUSTOM if plan is None else PLANS.get(plan)
    if base is None:
        raise ValueError(f"unknown plan {plan!r}; plans: {', '.join(PLANS)}")
    changes: dict[str, Any] = {k: v for k, v in (("weight", weight), ("max_in_flight", max_in_flight),
                                 ("rate_per_minute", rate_per_minute), ("max_priority", max_priority))
               if v is not None}
    return replace(base, **changes)


def policy(weight: float, max_in_flight: int | None) -> TenantPolicy:
    """The dispatch policy of a tenant's settings (max_in_flight None: no ceiling)."""
    return TenantPolicy(weight=weight, max_in_flight=max_in_flight)


def priority_allowed(priority: int, max_priority: int | None) -> bool:
    return max_priority is None or priority <= max_priority
