"""Weighted fair share across tenants: DRF with GPU-seconds as the only resource.

With one resource, Dominant Resource Fairness is weighted max-min fairness: a tenant's *share* is its
usage divided by its weight, and the next slot goes to the tenant with the smallest share among those that
have work the worker can run. Over a backlog this hands out GPU-seconds in proportion to the weights.

Usage (what ``TenantUsage.gpu_seconds`` means) is measured by ``TenantAccount``:

    usage = decayed(consumed GPU-seconds of finished attempts) + sum(est_gpu_seconds of in-flight jobs)

* In-flight work is charged at dispatch with its *estimate*, so a tenant that just received slots is
  already "ahead" before any of them finish; without this, every idle worker asking at once would go to the
  same tenant.
* When an attempt ends (success, failure or preemption alike: the GPU was busy either way) its estimate is
  taken back out and the GPU-seconds it really used go into ``consumed``.
* ``consumed`` decays exponentially with a half-life passed in by the caller, so a tenant is not punished
  forever for last week's burst; ``None`` means no decay (the plain cumulative total).

All values come in as arguments; nothing reads a clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class TenantPolicy:
    weight: float = 1.0
    max_in_flight: int | None = None

    def __post_init__(self) -> None:
        if not self.weight > 0:
            raise ValueError(f"tenant weight must be positive, got {self.weight}")
        if self.max_in_flight is not None and self.max_in_flight < 0:
            raise ValueError(f"max_in_flight must be >= 0 or None, got {self.max_in_flight}")


@dataclass(frozen=True)
class TenantUsage:
    tenant: str
    gpu_seconds: float = 0.0
    in_flight: int = 0


def share(usage: TenantUsage | None, policy: TenantPolicy) -> float:
    return (usage.gpu_seconds if usage is not None else 0.0) / policy.weight


@dataclass(frozen=True)
class DecayingTotal:
    value: float = 0.0
    as_of_ms: int = 0

    def at(self, now_ms: int, half_life_ms: int | None) -> DecayingTotal:
        if now_ms <= self.as_of_ms:
            # Time never runs backwards for the partition owner; if a caller's does, do not grow the total.
            return self
        if half_life_ms is None or self.value == 0.0:
            return DecayingTotal(self.value, now_ms)
        return DecayingTotal(self.value * 0.5 ** ((now_ms - self.as_of_ms) / half_life_ms), now_ms)

    def add(self, amount: float, now_ms: int, half_life_ms: int | None) -> DecayingTotal:
        current = self.at(now_ms, half_life_ms)
        return DecayingTotal(current.value + amount, current.as_of_ms)


@dataclass(frozen=True)
class TenantAccount:
    """What the scheduler keeps per tenant to produce ``TenantUsage``; every transition returns a new one."""

    tenant: str
    consumed: DecayingTotal = DecayingTotal()
    in_flight_est_gpu_seconds: float = 0.0
    in_flight: int = 0

    def on_dispatch(self, est_gpu_seconds: float) -> TenantAccount:
        return replace(
            self,
            in_flight_est_gpu_seconds=self.in_flight_est_gpu_seconds + est_gpu_seconds,
            in_flight=self.in_flight + 1,
        )

    def on_finish(
        self, est_gpu_seconds: float, used_gpu_seconds: float, now_ms: int, half_life_ms: int | None
    ) -> TenantAccount:
        in_flight = max(0, self.in_flight - 1)
        # Repeated float add/subtract leaves dust; with nothing in flight the estimate is exactly zero.
        est = max(0.0, self.in_flight_est_gpu_seconds - est_gpu_seconds) if in_flight else 0.0
        return TenantAccount(
            tenant=self.tenant,
            consumed=self.consumed.add(used_gpu_seconds, now_ms, half_life_ms),
            in_flight_est_gpu_seconds=est,
            in_flight=in_flight,
        )

    def usage(self, now_ms: int, half_life_ms: int | None) -> TenantUsage:
        consumed = self.consumed.at(now_ms, half_life_ms).value
        return TenantUsage(self.tenant, consumed + self.in_flight_est_gpu_seconds, self.in_flight)


# -- Usage shared across scheduler partitions ---------------------------------------------------------------
#
# Each partition's owner keeps the usage of the jobs it owns and publishes, per tenant, what it adds up to
# (`events.TenantUsageReport`: decayed GPU-seconds of ended leases as of `at_ms`, plus the estimated
# GPU-seconds of the leases it holds, as ``TenantAccount`` charges them). A tenant's global usage is the sum over partitions, each report's decayed part brought
# forward to the reader's clock. These functions are that arithmetic; which reports are current is the
# caller's business.


def decayed(amount: float, at_ms: int, now_ms: int, half_life_ms: int | None) -> float:
    """`amount` credited at `at_ms`, as it counts at `now_ms` (never more than it was)."""
    if half_life_ms is None or now_ms <= at_ms or amount == 0.0:
        return amount
    factor: float = 0.5 ** ((now_ms - at_ms) / half_life_ms)  # a positive base: a float, never complex
    return amount * factor


def credit(total: DecayingTotal, amount: float, at_ms: int, half_life_ms: int | None) -> DecayingTotal:
    """`total` plus `amount` used at `at_ms`, in whatever order the amounts arrive: an amount older than the
    total is decayed to the total's time instead of counting in full (``DecayingTotal.add`` would)."""
    if at_ms >= total.as_of_ms:
        return total.add(amount, at_ms, half_life_ms)
    return DecayingTotal(total.value + decayed(amount, at_ms, total.as_of_ms, half_life_ms), total.as_of_ms)


def combined_usage(tenant: str, reports: Iterable[Any], now_ms: int, half_life_ms: int | None) -> TenantUsage:
    """A tenant's usage over all partitions from one report per partition (objects with `at_ms`,
    `consumed_gpu_seconds`, `in_flight`, `in_flight_gpu_seconds`). Sums, so the order of the reports does
    not matter."""
    gpu_s, n = 0.0, 0
    for r in reports:
        gpu_s += decayed(r.consumed_gpu_seconds, r.at_ms, now_ms, half_life_ms) + r.in_flight_gpu_seconds
        n += r.in_flight
    return TenantUsage(tenant, gpu_s, n)
