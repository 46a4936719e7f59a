"""Priority preemption, wired: what the pure planner (domain/preemption.py) is given, and by whom.

The scheduler is partitioned: a priority-9 job queued on partition A and the priority-1 lease it should
displace on partition B may belong to two scheduler instances. Each instance decides for the leases of the
partitions it owns (only the owner may send a job's commands with authority over its state), once per stats
tick, per pool, from:

- **demand over all partitions:** its own partitions' queued jobs by tier (live), and every other
  partition's latest `PoolStats.queued_by_tier` from the compacted pool-stats topic (`PoolStatsView`, a
  consumer thread; records older than `STALE_MS` are ignored);
- **free workers:** workers of the pool this instance heard from lately that asked for work, hold no lease
  anywhere (the worker-lease index) and are not draining, or released a lease for a preemption in the last
  `FREE_WINDOW_MS` and hold none yet, plus the other instances' `idle_workers`;
- **leases already yielding:** its own leases with a pending PreemptRequested, plus the other partitions'
  `PoolStats.preempting`;
- **the budget:** the times of its own requests for the pool in the last minute, plus the other partitions'
  `PoolStats.preempted_1m` (counted as made now, so they hold the budget a little longer than a minute).

**One decider per pool and tick:** another instance's requests are seen a stats tick (about a second) and a
Kafka round trip late, so two instances deciding in the same second would each spend the whole budget
(docs/decisions/0024-one-preemption-decider-per-pool.md). So only the owner of the *lowest
partition holding a lease that may be asked back now* (for the tier plan: of a tier below the highest
waiting one) asks that tick; the others wait. Each record says, per partition, which leases may be asked
back (`PoolStats.preemptible_by_tier`) in the same record as the requests made for them (`preempted_1m`,
`preempting`), so when the decider's leases stop being candidates the next one sees what was spent. Still
not exact: an instance that has no fresh record of a lower partition (its owner just started or stopped
publishing) decides as if it were alone, and the victim is the lowest tier among the decider's own leases,
not necessarily the pool's. Nor does another instance see one instance's records of several partitions at
once: a view holding the new record of one (its lease asked, no candidate left there, so the viewer is now
the lowest holder) and the old record of another (its request not counted yet) lets a second decider spend
the budget again. So an instance also waits while another
instance's requests are arriving: for `SETTLE_S` after its view last saw a request counted on a partition it
does not own (`PoolStatsView.settling`), the records of that instance's other partitions, published in the
same tick, have time to arrive. With one instance owning every partition the budget is exact. The request times are memory: a new owner of a partition
starts with an empty minute (the previous owner's requests stop counting). Demand counts every
queued job of a higher tier, also one whose tenant is at its in-flight ceiling and so cannot take the freed
worker, and another instance's `idle_workers` may still count a worker that has since taken a lease
elsewhere (fewer preemptions, not more).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from typing import Any

from spotreel.adapters.compacted import CompactedReader
from spotreel.codec import Codec
from spotreel.domain import events as ev
from spotreel.domain.ids import pool_key
from spotreel.domain.preemption import MINUTE_MS, Budget, Demand, Preemption, Running, may_yield, plan, plan_fair
from spotreel.platform.topics import pool_stats_topic
from spotreel.config.settings import Settings

from spotreel.services.scheduler.partition import PartitionState

log = logging.getLogger("spotreel.scheduler.preempting")

# Another partition's pool-stats record older than this is not trusted (its owner stopped publishing).
STALE_MS = 10_000
# A worker that asked for work within this window, and holds nothing, is taken as free for the pool.
FREE_WINDOW_MS = 15_000
# After the view sees another partition's record count a new request, this instance does not decide for the
# pool for this long: two stats ticks, time for the records of the requester's other partitions to arrive.
SETTLE_S = 2.5


def budget_of(settings: Settings) -> Budget:
    return Budget(per_minute=max(0, settings.preempt_per_minute), min_run_ms=max(0, settings.preempt_min_run_s) * 1000)


def tiers_of(entries: Iterable[str]) -> Counter:
    """`queued_by_tier` entries (`priority=count`) as a Counter."""
    out: Counter = Counter()
    for entry in entries:
        tier, _, n = entry.partition("=")
        try:
            out[int(tier)] += int(n)
        except ValueError:
            continue
    return out


def running_of(part: PartitionState, pool: str) -> list[Running]:
    """The partition's held leases of `pool` as preemption weighs them (kept by `PartitionState.observe`)."""
    return list(part.running.get(pool, {}).values())


def preemptible_by_tier(part: PartitionState, pool: str, now_ms: int, budget: Budget) -> Counter:
    """This partition's leases of `pool` that may be asked back now (`may_yield`), by tier."""
    return Counter(r.priority for r in part.running.get(pool, {}).values() if may_yield(r, now_ms, budget))


def decider(own: dict[int, Counter], others: dict[int, Counter], below: int | None) -> int | None:
    """The partition whose owner decides the pool's preemptions this tick: the lowest holding a lease that may
    be asked back, of a tier below `below` when given; None: no partition holds one."""
    holding = [p for p, tiers in (*own.items(), *others.items())
               if any(n > 0 and (below is None or t < below) for t, n in tiers.items())]
    return min(holding, default=None)


def yielding_of(part: PartitionState, pool: str) -> int:
    return sum(1 for p in part.yielding.values() if p == pool)


def asked_1m(part: PartitionState, pool: str, now_ms: int) -> list[int]:
    """The times of this partition's PreemptLease requests for `pool` in the last minute (pruned here)."""
    times = part.preempt_asked.get(pool)
    if times is None:
        return []
    while times and times[0] <= now_ms - MINUTE_MS:
        times.popleft()
    return list(times)


def note_asked(part: PartitionState, pool: str, now_ms: int) -> None:
    part.preempt_asked.setdefault(pool, deque()).append(now_ms)


def free_workers(parts: Iterable[PartitionState], pool: str, now_ms: int, holds: Callable[[str], bool],
                 enough: int | None = None) -> int:
    """Workers of `pool` that hold no lease anywhere and will take waiting work: those that asked for work
    lately, and those that just released a lease for a preemption (they ask again at once; counting them
    keeps the next tick from asking a second lease back for the same waiting job). With `enough`, the count
    stops there (a pool with more free workers than waiting jobs preempts nothing; at an overloaded peak
    thousands of idle workers wait for their RequestWork to be read)."""
    free: set[str] = set()
    for part in parts:
        for worker_id in part.workers.idle_since(pool, now_ms - FREE_WINDOW_MS):  # kept per pool: no fleet walk
            if enough is not None and len(free) >= enough:
                return len(free)
            if worker_id not in free and not holds(worker_id):
                free.add(worker_id)
        for worker_id, at_ms in list(part.freed.items()):
            if now_ms - at_ms > FREE_WINDOW_MS:
                del part.freed[worker_id]
            elif not holds(worker_id) and pool in getattr(part.workers.get(worker_id), "pools", (pool,)):
                free.add(worker_id)
    return len(free)


def decide_pool(pool: str, parts: dict[int, PartitionState], others: Iterable[ev.PoolStats], now_ms: int,
                budget: Budget, holds: Callable[[str], bool],
                fair_ratio: int = 0, share_if_room: Callable[[str], float | None] = lambda t: None,
                share_of: Callable[[str], float] = lambda t: 0.0) -> list[tuple[int, Preemption]]:
    """(partition, preemption) for the leases of this instance's partitions to ask back for `pool` now: for
    higher tiers first, then (with `fair_ratio` >= 1) for under-served tenants within what is left of the
    budget. `share_if_room(tenant)`: its share over all partitions, None at its in-flight ceiling;
    `share_of(tenant)`: its share whatever its ceiling."""
    waiting: Counter = Counter()
    tenants: set[str] = set()
    top: dict[str, int] = {}  # each waiting tenant's highest queued tier, where known
    free = 0
    yielding, recent = 0, []
    running: list[tuple[int, Running]] = []
    own_victims: dict[int, Counter] = {}
    other_victims: dict[int, Counter] = {}
    for p, part in parts.items():
        queued = [j for j in list(part.index._jobs.values())  # noqa: SLF001 - read-only walk
                  if pool_key(j.model, j.gpu_type) == pool]
        waiting.update(j.priority for j in queued)
        tenants.update(j.tenant for j in queued)
        for j in queued:
            top[j.tenant] = max(top.get(j.tenant, j.priority), j.priority)
        yielding += yielding_of(part, pool)
        recent += asked_1m(part, pool, now_ms)
        mine = running_of(part, pool)
        running += [(p, r) for r in mine]
        own_victims[p] = Counter(r.priority for r in mine if may_yield(r, now_ms, budget))
    for stats in others:
        if stats.pool != pool or stats.partition in parts or now_ms - stats.at_ms > STALE_MS:
            continue
        waiting.update(tiers_of(stats.queued_by_tier))
        tenants.update(t for t, n in tiers_of_tenants(stats.queued_by_tenant).items() if n > 0)
        for entry in getattr(stats, "queued_by_tier_tenant", ()) or ():
            key, _, _ = entry.rpartition("=")
            tier, _, tenant = key.partition("/")
            if tier.lstrip("-").isdigit():
                top[tenant] = max(top.get(tenant, int(tier)), int(tier))
        free += stats.idle_workers
        yielding += getattr(stats, "preempting", 0) or 0
        recent += [now_ms] * (getattr(stats, "preempted_1m", 0) or 0)  # made within the minute: counted as now
        other_victims[stats.partition] = tiers_of(getattr(stats, "preemptible_by_tier", ()) or ())
    if not running or not waiting:
        return []
    # More free workers than waiting jobs (over all partitions) leave nothing unserved: counting stops there.
    free += free_workers(parts.values(), pool, now_ms, holds, enough=sum(waiting.values()))
    where = {r.job_id: p for p, r in running}
    chosen: list[Preemption] = []
    if decider(own_victims, other_victims, max(waiting)) in parts:
        chosen = list(plan(Demand(dict(waiting), free, yielding), [r for _, r in running], recent, now_ms, budget))
    if fair_ratio >= 1 and decider(own_victims, other_victims, None) in parts:
        asked = {c.job_id for c in chosen}
        under = {t: s for t in tenants if (s := share_if_room(t)) is not None}
        holders = {r.tenant: share_of(r.tenant) for _, r in running}
        chosen += plan_fair(under, holders, [r for _, r in running if r.job_id not in asked], free,
                            yielding + len(chosen), recent + [now_ms] * len(chosen), now_ms, budget, fair_ratio, top)
    return [(where[c.job_id], c) for c in chosen]


def tiers_of_tenants(entries: Iterable[str]) -> Counter:
    """`queued_by_tenant` entries (`tenant=count`) as a Counter (split at the last `=`)."""
    out: Counter = Counter()
    for entry in entries:
        tenant, _, n = entry.rpartition("=")
        try:
            out[tenant] += int(n)
        except ValueError:
            continue
    return out


def counts_new_request(before: ev.PoolStats | None, after: ev.PoolStats) -> bool:
    """Whether `after` (the newer record of one pool and partition) counts a preemption request `before`
    did not: more asked in the last minute, or more leases yielding."""
    asked = getattr(after, "preempted_1m", 0) or 0
    yielding = getattr(after, "preempting", 0) or 0
    if before is None:
        return asked > 0 or yielding > 0
    return asked > (getattr(before, "preempted_1m", 0) or 0) or yielding > (getattr(before, "preempting", 0) or 0)


class PoolStatsView:
    """The latest pool-stats record of every (pool, partition), from the compacted topic (one consumer
    thread, from the beginning; not waited for: preemption simply sees less until it has read)."""

    def __init__(self, settings: Settings, codec: Codec | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.codec = codec or Codec.default()
        self._monotonic = monotonic
        self._latest: dict[tuple[str, int], ev.PoolStats] = {}
        # (pool, partition) -> when this view last read a record of it counting more requests than the one
        # before (preempted_1m or preempting up): another decider is spending the budget.
        self._asked_seen: dict[tuple[str, int], float] = {}
        self._lock = threading.Lock()
        self._reader = CompactedReader(settings, "pool-stats-view", [pool_stats_topic(settings)], self.apply,
                                       codec=self.codec, fetch_wait_ms=100, poll_s=0.2, track_end=False)

    def records(self) -> list[ev.PoolStats]:
        with self._lock:
            return list(self._latest.values())

    def apply(self, record: Any) -> None:
        if isinstance(record, ev.PoolStats):
            with self._lock:
                key = (record.pool, record.partition)
                current = self._latest.get(key)
                if current is None or current.at_ms <= record.at_ms:
                    self._latest[key] = record
                    if counts_new_request(current, record):
                        self._asked_seen[key] = self._monotonic()

    def settling(self, pool: str, own: Iterable[int], within_s: float = SETTLE_S) -> bool:
        """Whether, within the last `within_s`, this view read a record of `pool` on a partition not in `own`
        that counted a new preemption request: the requester's records of its other partitions may still
        be on their way, so a decision now could spend the budget a second time."""
        mine = set(own)
        since = self._monotonic() - within_s
        with self._lock:
            return any(at >= since for (p, part), at in self._asked_seen.items() if p == pool and part not in mine)

    @property
    def started(self) -> bool:
        """Whether `start` was called (its reader thread exists); the scheduler starts it once."""
        return self._reader.started

    def start(self) -> None:
        self._reader.start()

    def close(self) -> None:
        self._reader.close()
