"""Which queued job an idle worker gets.

``choose`` (a full scan, O(n)) and ``DispatchIndex.choose`` (O(number of (pool, tenant, priority) queues
the worker can see)) apply the same rule, because both hand the same *queue heads* to ``_select``.

The rule, for one non-draining worker asking at ``now_ms``. Candidates are the queued jobs whose pool the
worker serves (``WorkerOffer.serves``) and whose tenant is below its ``max_in_flight``; nothing else is
ever returned.

1. **Starvation bound.** If any candidate has waited at least ``aging.max_wait_ms`` it is *overdue*; the
   overdue candidate with the smallest ``(enqueued_at_ms, job_id)`` is returned, whatever its priority,
   tenant share or model warmth. Hence: a job J whose tenant stays below its in-flight quota is dispatched
   by the first request of a worker serving J's pool made at or after ``J.enqueued_at_ms + max_wait_ms``,
   unless an older overdue job that the same worker may run exists; with k such older jobs, J goes no
   later than the (k+1)-th such request.
2. **Strict tiers across the pool.** Otherwise only the candidates of the highest *effective* priority
   (``aging.effective_priority``: the tier, plus an aging credit when ``aging.step_ms`` is set; off by
   default) stay in the race, whatever their tenant: a higher tier is never served after a lower one. This
   is the order the requesters' routing (``dispatch/order.py``: the partition queueing the highest tier
   first) and priority preemption (``preemption.py``) already assume across partitions.
3. **Fair share across tenants, within that tier.** The tenant with the smallest ``share = usage / weight``
   (see ``fairness``) among those with a job of that tier wins; equal shares go to the tenant whose job
   has the smaller ``(enqueued_at_ms, job_id)``.
4. **Age inside the tenant.** Its job of that tier with the smallest ``(enqueued_at_ms, job_id)`` goes.
5. **Model affinity** (``DispatchConfig.model_affinity``, on by default). A worker that declares warm models
   (the weights it has loaded) is offered only the candidates of those models while any is left after
   step 1; a job of another model it serves (a *model switch*: unload, load) is chosen only when the
   partition has no candidate of its warm models. Steps 2 to 4 and 6 then apply among what is offered. A
   worker that declares no warm model, or all its models warm, sees no difference. Loading a video
   model takes minutes, far more than the unfairness of serving the loaded model's jobs first; the
   starvation bound (step 1) still takes any overdue job, warm or not.
6. **Warm-model preference** (matters with model affinity off; with it on, what is offered is all warm or
   all cold). Among the tenants of the top tier whose share is within ``warm_share_slack`` of the smallest
   share (with the default 0.0: exactly tied), a job of the top tier whose model is warm on this worker,
   the one with the smallest ``(share, enqueued_at_ms, job_id)``, is returned instead of the result of 3-4.
   A warm job never overtakes a higher effective tier, nor a tenant further below its share than the slack.

Why graded aging is off by default (``AgingPolicy.step_ms`` None): tiers cross tenants, so a credit per
minute waited would, in a backlog that lasts minutes, rank jobs by their age across tenants and undo the
weights. The starvation bound (``max_wait_ms``, 30 min) is what lifts a starving job.

``queue_order.dispatch_order`` lists the order successive grants would take a pool's jobs in by this
rule; the gateway's queue position and ETA follow it (``queue_order.jobs_ahead``).

Everything is a total order over unique job ids, so the answer does not depend on input order.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from spotreel.domain.aging import AgingPolicy, effective_priority, is_overdue
from spotreel.domain.fairness import TenantPolicy, TenantUsage, share
from spotreel.domain.pools import Pool, WorkerOffer
from spotreel.domain.quotas import has_in_flight_room


@dataclass(frozen=True)
class QueuedJob:
    job_id: str
    tenant: str
    priority: int
    model: str
    gpu_type: str
    enqueued_at_ms: int
    est_gpu_seconds: float = 0.0

    @property
    def pool(self) -> Pool:
        return Pool(self.model, self.gpu_type)


@dataclass(frozen=True)
class DispatchConfig:
    aging: AgingPolicy = field(default_factory=AgingPolicy)
    default_policy: TenantPolicy = field(default_factory=TenantPolicy)
    warm_share_slack: float = 0.0
    model_affinity: bool = True

    def __post_init__(self) -> None:
        if not self.warm_share_slack >= 0:
            raise ValueError(f"warm_share_slack must be >= 0, got {self.warm_share_slack}")


def _fifo(job: QueuedJob) -> tuple[int, str]:
    return (job.enqueued_at_ms, job.job_id)


def _select(
    worker: WorkerOffer,
    heads: Iterable[QueuedJob],
    usage: Mapping[str, TenantUsage],
    policies: Mapping[str, TenantPolicy],
    now_ms: int,
    config: DispatchConfig,
) -> QueuedJob | None:
    """Apply the module's rule to queue heads: for every (pool, tenant, priority) the worker can see, the
    job with the smallest (enqueued_at_ms, job_id). Within such a queue that job also has the highest
    effective priority, since aging is monotone in waiting time, so heads are all the rule ever needs."""
    if worker.draining:
        return None
    room: dict[str, bool] = {}
    overdue: QueuedJob | None = None
    tiers: dict[str, list[tuple[int, QueuedJob]]] = {}
    for job in heads:
        ok = room.get(job.tenant)
        if ok is None:
            used = usage.get(job.tenant)
            limit = policies.get(job.tenant, config.default_policy).max_in_flight
            ok = room[job.tenant] = has_in_flight_room(used.in_flight if used else 0, limit)
        if not ok:
            continue
        if is_overdue(job.enqueued_at_ms, now_ms, config.aging):
            if overdue is None or _fifo(job) < _fifo(overdue):
                overdue = job
            continue
        eff = effective_priority(job.priority, job.enqueued_at_ms, now_ms, config.aging)
        tiers.setdefault(job.tenant, []).append((eff, job))
    if overdue is not None:
        return overdue
    if config.model_affinity and worker.warm_models:
        warm_only = {t: w for t, cands in tiers.items()
                     if (w := [c for c in cands if worker.is_warm(c[1].pool)])}
        if warm_only:
            tiers = warm_only
    if not tiers:
        return None

    top = max(eff for cands in tiers.values() for eff, _ in cands)
    tiers = {t: top_only for t, cands in tiers.items() if (top_only := [c for c in cands if c[0] == top])}
    shares = {t: share(usage.get(t), policies.get(t, config.default_policy)) for t in tiers}
    best = {t: min(cands, key=lambda c: _fifo(c[1])) for t, cands in tiers.items()}
    if worker.warm_models:
        close = min(shares.values()) + config.warm_share_slack
        warm: tuple[tuple[float, int, str], QueuedJob] | None = None
        for t, cands in tiers.items():
            if shares[t] > close:
                continue
            for _, job in cands:
                if worker.is_warm(job.pool):
                    key = (shares[t], job.enqueued_at_ms, job.job_id)
                    if warm is None or key < warm[0]:
                        warm = (key, job)
        if warm is not None:
            return warm[1]
    tenant = min(tiers, key=lambda t: (shares[t], *_fifo(best[t][1])))
    return best[tenant][1]


def choose(
    worker: WorkerOffer,
    queued_jobs: Iterable[QueuedJob],
    tenant_usage: Mapping[str, TenantUsage],
    policies: Mapping[str, TenantPolicy],
    now_ms: int,
    config: DispatchConfig | None = None,
) -> str | None:
    """The job id ``worker`` should get now, or None. One pass over ``queued_jobs``."""
    if worker.draining:
        return None
    heads: dict[tuple[str, str, int], QueuedJob] = {}
    for job in queued_jobs:
        if job.gpu_type != worker.gpu_type or job.model not in worker.models:
            continue
        key = (job.model, job.tenant, job.priority)
        held = heads.get(key)
        if held is None or _fifo(job) < _fifo(held):
            heads[key] = job
    picked = _select(worker, heads.values(), tenant_usage, policies, now_ms, config or DispatchConfig())
    return picked.job_id if picked is not None else None


class DispatchIndex:
    """Queued jobs grouped into (pool, tenant, priority) FIFO queues, so ``choose`` only looks at heads.

    The one mutable type in the domain: a cache the scheduler partition derives from its job table (a hint,
    never the authority; rebuild it with ``DispatchIndex(jobs)``). It reads no clock and does no I/O.
    ``add``/``discard`` cost O(log q + q) for a queue of length q (a list insert, memmove-cheap);
    ``choose`` costs O(number of non-empty queues in the worker's pools), independent of queue lengths.
    A scheduler answering several idle workers calls ``choose``, charges the tenant (``TenantAccount.
    on_dispatch``), ``discard``s the job, and asks again.
    """

    def __init__(self, jobs: Iterable[QueuedJob] = ()) -> None:
        self._jobs: dict[str, QueuedJob] = {}
        self._queues: dict[Pool, dict[tuple[str, int], list[tuple[int, str]]]] = {}
        self._depth: dict[Pool, int] = {}
        for job in jobs:
            self.add(job)

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def get(self, job_id: str) -> QueuedJob | None:
        return self._jobs.get(job_id)

    def depth(self, pool: Pool) -> int:
        return self._depth.get(pool, 0)

    def add(self, job: QueuedJob) -> None:
        """Insert, or replace the job with the same id (a reprioritized or requeued job)."""
        self.discard(job.job_id)
        self._jobs[job.job_id] = job
        queues = self._queues.setdefault(job.pool, {})
        insort(queues.setdefault((job.tenant, job.priority), []), _fifo(job))
        self._depth[job.pool] = self._depth.get(job.pool, 0) + 1

    def discard(self, job_id: str) -> QueuedJob | None:
        job = self._jobs.pop(job_id, None)
        if job is None:
            return None
        pool, key = job.pool, (job.tenant, job.priority)
        queue = self._queues[pool][key]
        del queue[bisect_left(queue, _fifo(job))]
        if not queue:
            del self._queues[pool][key]
            if not self._queues[pool]:
                del self._queues[pool]
        self._depth[pool] -= 1
        if not self._depth[pool]:
            del self._depth[pool]
        return job

    def heads(self, worker: WorkerOffer, skip: AbstractSet[str] = frozenset()) -> Iterator[QueuedJob]:
        """The first job of every queue the worker can see, passing over the ids in `skip` (jobs the caller
        keeps from this worker for now, e.g. for a worker that can resume them exactly: resume_match.py)."""
        if worker.draining:
            return
        for pool in worker.pools:
            for queue in self._queues.get(pool, {}).values():
                if not skip:
                    yield self._jobs[queue[0][1]]
                    continue
                head = next((job_id for _, job_id in queue if job_id not in skip), None)
                if head is not None:
                    yield self._jobs[head]

    def choose(
        self,
        worker: WorkerOffer,
        tenant_usage: Mapping[str, TenantUsage],
        policies: Mapping[str, TenantPolicy],
        now_ms: int,
        config: DispatchConfig | None = None,
        skip: AbstractSet[str] = frozenset(),
    ) -> str | None:
        picked = _select(worker, self.heads(worker, skip), tenant_usage, policies, now_ms, config or DispatchConfig())
        return picked.job_id if picked is not None else None
