"""Priority aging: how waiting turns into urgency, and the hard starvation bound.

Priorities are integer tiers, higher is more urgent. Graded aging adds one tier per ``step_ms`` waited
(integer division, so the result never depends on float rounding), optionally capped at ``max_boost``
tiers. It is off by default: dispatch ranks tiers across tenants (``dispatch``), so a credit per minute
waited would turn a backlog of minutes into first-come-first-served across tenants and undo their weights.
Strict tiers alone can starve a low tier behind a flood of high-tier work, and a tenant that keeps losing
on share, so ``max_wait_ms`` is the backstop: a job that has waited at least that long is *overdue*, and
overdue work beats everything except pool membership, draining and the in-flight quota (see
``job_choice.choose`` for the exact guarantee).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AgingPolicy:
    step_ms: int | None = None
    max_boost: int | None = None
    max_wait_ms: int | None = 30 * 60_000

    def __post_init__(self) -> None:
        if self.step_ms is not None and self.step_ms <= 0:
            raise ValueError(f"aging step_ms must be positive or None, got {self.step_ms}")
        if self.max_boost is not None and self.max_boost < 0:
            raise ValueError(f"aging max_boost must be >= 0 or None, got {self.max_boost}")
        if self.max_wait_ms is not None and self.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0 or None, got {self.max_wait_ms}")


def waited_ms(enqueued_at_ms: int, now_ms: int) -> int:
    # A job stamped slightly in the future (clock skew between partitions) has simply not waited yet.
    return max(0, now_ms - enqueued_at_ms)


def effective_priority(priority: int, enqueued_at_ms: int, now_ms: int, policy: AgingPolicy) -> int:
    if policy.step_ms is None:
        return priority
    boost = waited_ms(enqueued_at_ms, now_ms) // policy.step_ms
    if policy.max_boost is not None:
        boost = min(boost, policy.max_boost)
    return priority + boost


def is_overdue(enqueued_at_ms: int, now_ms: int, policy: AgingPolicy) -> bool:
    return policy.max_wait_ms is not None and waited_ms(enqueued_at_ms, now_ms) >= policy.max_wait_ms
