"""Why a grant went to this job: the facts dispatch's rule (job_choice.py) weighed, recorded on the JobLeased.

During an incident ("why did tenant B's job run before mine?") the rule can only be explained with the
inputs it saw at that moment: the tenants' usage over all partitions, their weights, the aging clock, the
worker's warm models. Those are gone a second later, so the scheduler records them with the grant
(`GrantLease` -> `JobLeased`, the `why_*` fields) and `spotreel replay --why JOB_ID` prints them.

- `effective_priority`: the job's tier plus its aging credit (`aging.effective_priority`); the credit is
  the difference from the job's own priority;
- `overdue`: it had waited past the starvation bound, which beats shares and tiers;
- `waited_ms`: since it was queued (or requeued);
- `share`, `weight`: its tenant's fair share (GPU-seconds over all partitions / weight) and weight;
- `next_share`: the smallest share among the other tenants that had a candidate of the same effective tier
  for this worker and room under their in-flight ceiling (None: no other tenant had one; tiers are strict
  across tenants, so a lower tier was no competition): the winner's share is at most this, unless overdue
  or a warm tie decided;
- `warm`: the job's model was loaded on the worker;
- `candidates`: the (pool, tenant, priority) queue heads the rule looked at.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from spotreel.domain.aging import effective_priority, is_overdue, waited_ms
from spotreel.domain.job_choice import DispatchConfig, QueuedJob
from spotreel.domain.fairness import TenantPolicy, TenantUsage, share
from spotreel.domain.pools import WorkerOffer
from spotreel.domain.quotas import has_in_flight_room


@dataclass(frozen=True)
class GrantReasons:
    effective_priority: float
    overdue: bool
    waited_ms: int
    share: float
    next_share: float | None
    weight: float
    warm: bool
    candidates: int


def reasons(job: QueuedJob, worker: WorkerOffer, heads: Iterable[QueuedJob], usage: Mapping[str, TenantUsage],
            policies: Mapping[str, TenantPolicy], now_ms: int, config: DispatchConfig) -> GrantReasons:
    heads = list(heads)

    def policy_of(tenant: str) -> TenantPolicy:
        return policies.get(tenant, config.default_policy)

    # Tenants at their in-flight ceiling were passed over by the rule, and a lower tier never competes with a
    # higher one: neither was competition.
    tier = effective_priority(job.priority, job.enqueued_at_ms, now_ms, config.aging)
    others = {h.tenant for h in heads if h.tenant != job.tenant
              and effective_priority(h.priority, h.enqueued_at_ms, now_ms, config.aging) == tier
              and has_in_flight_room(u.in_flight if (u := usage.get(h.tenant)) else 0, policy_of(h.tenant).max_in_flight)}
    return GrantReasons(
        effective_priority=float(effective_priority(job.priority, job.enqueued_at_ms, now_ms, config.aging)),
        overdue=is_overdue(job.enqueued_at_ms, now_ms, config.aging),
        waited_ms=waited_ms(job.enqueued_at_ms, now_ms),
        share=share(usage.get(job.tenant), policy_of(job.tenant)),
        next_share=min((share(usage.get(t), policy_of(t)) for t in others), default=None),
        weight=float(policy_of(job.tenant).weight),
        warm=worker.is_warm(job.pool),
        candidates=len(heads))


def explain(priority: int, r: GrantReasons) -> str:
    """One sentence for `replay --why`: which part of the rule decided, with its numbers."""
    credit = r.effective_priority - priority
    tier = f"priority {priority}" + (f" (+{credit:g} aging credit)" if credit else "")
    if r.overdue:
        rule = f"overdue after waiting {r.waited_ms / 1000:.1f} s: the starvation bound beats shares and tiers"
    elif r.next_share is None:
        rule = "its tenant was the only one with a candidate of this tier for this worker; the highest tier went first"
    elif r.share < r.next_share:
        rule = (f"its tenant was the furthest below its fair share: share {r.share:.1f} GPU-s/weight (weight "
                f"{r.weight:g}) < {r.next_share:.1f} of the next tenant")
    elif r.share == r.next_share:
        rule = f"tied on share {r.share:.1f} with another tenant; the older job (or a warm model) went first"
    else:
        rule = (f"share {r.share:.1f} above another tenant's {r.next_share:.1f}: the warm model or that tenant's "
                f"ceiling decided")
    warm = "model warm on the worker" if r.warm else "model not warm on the worker"
    return f"{tier}; {rule}; {warm}; waited {r.waited_ms / 1000:.1f} s; {r.candidates} queue head(s) considered"
