"""When to checkpoint: Young/Daly's optimum from the checkpoint cost and the preemption rate.

With checkpoint cost C and mean time between preemptions M, checkpointing every sqrt(2·C·M) seconds
minimises expected lost work plus checkpoint overhead (Young 1974; Daly 2006 for C << M). The result is
bounded: too short and a cheap checkpoint still floods S3, too long and a rare preemption throws away
minutes of GPU time. C is measured by the worker as it goes. M is estimated from what the pool measured
(`estimated_mtbf_s`): the scheduler's pool-stats count the pool's lost leases and its leased time over the
last hour, and the configured MTBF (`--mtbf`) only serves as the prior those observations move, so a pool
whose spot market turns hostile checkpoints more often within the hour, and a quiet pool less often.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


# The estimate stays within these, whatever the pool reports: a handful of losses over a few leased seconds
# must not ask for a checkpoint every step, nor a long quiet spell for none for a month.
MTBF_FLOOR_S = 1.0
MTBF_CEILING_S = 30 * 86_400.0


def estimated_mtbf_s(prior_mtbf_s: float, prior_losses: float, losses: float, leased_s: float) -> float:
    """Mean leased seconds between lost leases: the Gamma-Poisson posterior mean of the loss rate, inverted.

    The prior counts as `prior_losses` losses observed over `prior_losses × prior_mtbf_s` leased seconds;
    the pool adds `losses` over `leased_s`. The estimated rate (prior_losses + losses) / (prior_losses ×
    prior_mtbf_s + leased_s) is a weighted mean of the prior's rate and the measured one, the measured one
    weighing more the more leased time it covers. Bounded to [MTBF_FLOOR_S, MTBF_CEILING_S] (an infinite
    prior counts as the ceiling)."""
    if not prior_mtbf_s > 0:
        raise ValueError(f"the prior MTBF must be > 0 seconds, got {prior_mtbf_s!r}")
    prior_mtbf_s = min(prior_mtbf_s, MTBF_CEILING_S)
    if not (prior_losses > 0 and math.isfinite(prior_losses)):
        raise ValueError(f"the prior's weight must be a finite number > 0 of losses, got {prior_losses!r}")
    if not (losses >= 0 and math.isfinite(losses) and leased_s >= 0 and math.isfinite(leased_s)):
        raise ValueError(f"measured losses and leased time must be finite and >= 0, got {losses!r}, {leased_s!r}")
    mtbf = (prior_losses * prior_mtbf_s + leased_s) / (prior_losses + losses)
    return min(MTBF_CEILING_S, max(MTBF_FLOOR_S, mtbf))


def optimal_interval_s(checkpoint_cost_s: float, mtbf_s: float, lo: float, hi: float) -> float:
    if not (checkpoint_cost_s >= 0 and math.isfinite(checkpoint_cost_s)):
        raise ValueError(f"checkpoint cost must be a finite number >= 0, got {checkpoint_cost_s!r}")
    if not (mtbf_s > 0):
        raise ValueError(f"MTBF must be > 0 seconds, got {mtbf_s!r}")
    if not (0 < lo <= hi):
        raise ValueError(f"bounds must satisfy 0 < lo <= hi, got lo={lo!r} hi={hi!r}")
    if math.isinf(mtbf_s):
        return hi  # never preempted: checkpoint as rarely as allowed
    return min(hi, max(lo, math.sqrt(2.0 * checkpoint_cost_s * mtbf_s)))


@dataclass
class IntervalPolicy:
    """Decides whether a checkpoint is due. Fixed: every `fixed_s` seconds. Adaptive: Young/Daly from the
    measured cost (an exponentially weighted mean of `record_cost` samples) and the MTBF: `prior_mtbf_s`
    until the pool's measured losses arrive (`observe_pool`), then their estimate around that prior."""

    fixed_s: float | None = None
    mtbf_s: float = 3600.0
    prior_mtbf_s: float | None = None  # None: mtbf_s as given is the prior
    prior_losses: float = 1.0
    lo_s: float = 5.0
    hi_s: float = 600.0
    cost_s: float = 0.0
    smoothing: float = 0.3
    samples: int = 0

    def __post_init__(self) -> None:
        if self.fixed_s is not None and not self.fixed_s > 0:
            raise ValueError(f"a fixed interval must be > 0 seconds, got {self.fixed_s!r}")
        if not 0 < self.smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {self.smoothing!r}")
        optimal_interval_s(self.cost_s, self.mtbf_s, self.lo_s, self.hi_s)  # validates the rest
        if self.prior_mtbf_s is None:
            self.prior_mtbf_s = self.mtbf_s
        estimated_mtbf_s(self.prior_mtbf_s, self.prior_losses, 0, 0)  # validates the prior

    @classmethod
    def fixed(cls, interval_s: float) -> "IntervalPolicy":
        return cls(fixed_s=interval_s)

    @classmethod
    def adaptive(cls, mtbf_s: float, lo_s: float = 5.0, hi_s: float = 600.0,
                 initial_cost_s: float = 0.0, prior_losses: float = 1.0) -> "IntervalPolicy":
        """`mtbf_s`: the prior, worth `prior_losses` losses, until `observe_pool` brings measurements."""
        return cls(mtbf_s=mtbf_s, lo_s=lo_s, hi_s=hi_s, cost_s=initial_cost_s, prior_losses=prior_losses)

    @property
    def interval_s(self) -> float:
        if self.fixed_s is not None:
            return self.fixed_s
        return optimal_interval_s(self.cost_s, self.mtbf_s, self.lo_s, self.hi_s)

    def record_cost(self, seconds: float) -> None:
        """One measured checkpoint (snapshot + encode + upload). The first sample is taken as is."""
        if not (seconds >= 0 and math.isfinite(seconds)):
            raise ValueError(f"checkpoint cost must be a finite number >= 0, got {seconds!r}")
        self.cost_s = seconds if self.samples == 0 else (
            self.smoothing * seconds + (1 - self.smoothing) * self.cost_s)
        self.samples += 1

    def observe_mtbf(self, mtbf_s: float) -> None:
        if not mtbf_s > 0:
            raise ValueError(f"MTBF must be > 0 seconds, got {mtbf_s!r}")
        self.mtbf_s = mtbf_s

    def observe_pool(self, losses: float, leased_s: float) -> float:
        """The pool's lease losses over its leased seconds (pool-stats, last hour); returns the new MTBF."""
        self.mtbf_s = estimated_mtbf_s(self.prior_mtbf_s, self.prior_losses, losses, leased_s)  # type: ignore[arg-type]
        return self.mtbf_s

    def due(self, now: float, last_ckpt_at: float) -> bool:
        return now - last_ckpt_at >= self.interval_s
