"""Fair share across scheduler partitions (services/scheduler/fairshare.py), without Kafka.

The arithmetic (domain/fairness.py: `decayed`, `credit`, `combined_usage`) as hypothesis properties, the
ledger a partition keeps from its job states, and a discrete-event simulation of the live path's parts: real
job states (decide / evolve), one `PartitionState` per partition (its dispatch index and ledger), usage
reports shared through a `FairShareView`, pool-stats records with `min_share` read by the requesters'
`PoolQueues` ordering, and `DispatchIndex.choose` with `GlobalUsage` and the tenants' weights. Tenant a
(weight 3) has jobs on partitions 0 and 1 only, tenant b (weight 1) on 2 and 3 only: no partition ever sees
both, so whatever share they get comes from the sharing. The same simulation with each partition's own usage
and equal weights (what dispatch did before) splits the pool evenly instead.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.dispatch.order import PoolQueues, request_order
from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.domain import ids
from spotreel.domain.decide import decide
from spotreel.domain.job_choice import DispatchConfig
from spotreel.domain.evolve import fold
from spotreel.domain.fairness import DecayingTotal, combined_usage, credit, decayed
from spotreel.domain.aging import AgingPolicy
from spotreel.domain.pools import WorkerOffer
from spotreel.services.scheduler.fairshare import FairShareView, GlobalUsage, TenantLedger
from spotreel.services.scheduler.partition import PartitionState
from spotreel.services.scheduler.poolstats import pool_stats, share_if_room
from spotreel.config.settings import Settings
from tests.unit.jobkit import T0, submit
from tests.harness.hypothesis_profiles import examples

pytestmark = pytest.mark.unit

HOUR = 3_600_000
amounts = st.lists(st.tuples(st.floats(0, 1e4), st.integers(0, 10 * HOUR)), max_size=12)


@given(amounts, st.sampled_from([None, 60_000, HOUR]), st.randoms())
@settings(max_examples=examples(200), deadline=None)
def test_credit_does_not_depend_on_the_order_amounts_arrive_in(items, half_life, rnd):
    shuffled = list(items)
    rnd.shuffle(shuffled)
    now = 11 * HOUR
    totals = []
    for order in (items, shuffled):
        total = DecayingTotal()
        for amount, at in order:
            total = credit(total, amount, at, half_life)
        totals.append(total.at(now, half_life).value)
    expected = sum(decayed(a, at, now, half_life) for a, at in items)
    assert totals[0] == pytest.approx(expected, rel=1e-9, abs=1e-6)
    assert totals[1] == pytest.approx(expected, rel=1e-9, abs=1e-6)


@given(amounts, st.sampled_from([None, 60_000, HOUR]))
@settings(max_examples=examples(100), deadline=None)
def test_decay_never_grows_an_amount(items, half_life):
    for amount, at in items:
        assert 0 <= decayed(amount, at, at + 1000, half_life) <= amount


reports = st.lists(st.builds(ev.TenantUsageReport, tenant=st.just("t"), partition=st.integers(0, 5),
                             at_ms=st.integers(0, HOUR), consumed_gpu_seconds=st.floats(0, 1e5),
                             in_flight=st.integers(0, 50), in_flight_gpu_seconds=st.floats(0, 1e4)), max_size=8)


@given(reports, st.randoms())
@settings(max_examples=examples(100), deadline=None)
def test_combined_usage_is_a_sum_in_any_order(rs, rnd):
    shuffled = list(rs)
    rnd.shuffle(shuffled)
    a = combined_usage("t", rs, HOUR, HOUR)
    b = combined_usage("t", shuffled, HOUR, HOUR)
    assert a.in_flight == b.in_flight == sum(r.in_flight for r in rs)
    assert a.gpu_seconds == pytest.approx(b.gpu_seconds)
    assert a.gpu_seconds <= sum(r.consumed_gpu_seconds + r.in_flight_gpu_seconds for r in rs) + 1e-6


# -- the ledger ----------------------------------------------------------------------------------------------

def run(events_of):
    """Fold a job's events one decision at a time; returns the states before and after each."""
    state, pairs = None, []
    for command, at in events_of:
        after = fold(decide(state, command, at), state)
        pairs.append((state, after))
        state = after
    return pairs


def test_the_ledger_holds_an_estimate_while_leased_then_what_was_used():
    job = submit("k1", tenant="acme")
    lease_ttl = 30_000
    pairs = run([(job, T0), (c.GrantLease("g1", job.job_id, "w1", "tiny-t2v@h100", lease_ttl), T0 + 1000),
                 (c.CompleteJob("d1", job.job_id, 1, "w1", ids.artifact_key(job.job_id, 1), "sha", 1), T0 + 6000)])
    ledger = TenantLedger(half_life_ms=None, est_ms=lambda pool: 2000.0)
    for before, after in pairs[:2]:
        ledger.observe(before, after)
    r = ledger.report("acme", 3, T0 + 2000)
    assert (r.in_flight, r.in_flight_gpu_seconds, r.consumed_gpu_seconds) == (1, 2.0, 0.0)
    ledger.observe(*pairs[2])
    r = ledger.report("acme", 3, T0 + 7000)
    assert (r.in_flight, r.in_flight_gpu_seconds, r.consumed_gpu_seconds, r.used_gpu_seconds) == (0, 0.0, 5.0, 5.0)
    # A new owner rebuilds from the table: the same total from the final state alone.
    rebuilt = TenantLedger(half_life_ms=None)
    rebuilt.observe(None, pairs[2][1])
    assert rebuilt.report("acme", 3, T0 + 7000).consumed_gpu_seconds == 5.0
    assert [r.tenant for r in ledger.take_reports(3, T0 + 7000)] == ["acme"]
    assert ledger.take_reports(3, T0 + 7000) == []  # nothing changed since


def test_a_manual_requeue_resetting_render_time_is_not_negative_usage():
    job = submit("k1", tenant="acme")
    pairs = run([(job, T0), (c.GrantLease("g1", job.job_id, "w1", "tiny-t2v@h100", 30_000), T0),
                 (c.FailJob("f1", job.job_id, 1, "w1", "bad", "no", False, None), T0 + 4000),
                 (c.RequeueJob("r1", job.job_id, "user"), T0 + 5000)])
    ledger = TenantLedger(half_life_ms=None)
    for before, after in pairs:
        ledger.observe(before, after)
    assert pairs[-1][1].render_ms == 0
    assert ledger.report("acme", 0, T0 + 6000).consumed_gpu_seconds == 4.0


# -- the cross-partition simulation --------------------------------------------------------------------------

PARTS = 4
MODEL, GPU = "tiny-t2v", "h100"
POOL = ids.pool_key(MODEL, GPU)
RUN_MS = 3000
NO_AGING = DispatchConfig(aging=AgingPolicy(step_ms=None, max_wait_ms=None))


class Cluster:
    """Each partition owned by its own scheduler instance (the pessimistic case: every other partition's
    usage comes from reports). Reports are applied as they are published; pool stats once a second."""

    def __init__(self, weights: dict[str, float], shared: bool = True) -> None:
        self.shared = shared
        self.parts = {p: PartitionState(p, ledger=TenantLedger(half_life_ms=HOUR)) for p in range(PARTS)}
        for part in self.parts.values():
            part.ledger.est_ms = part.est_run_ms
        self.view = FairShareView(Settings(partitions=PARTS), Codec.default())
        for t, w in weights.items():
            self.view.apply(ev.TenantSettings(t, "custom", w, 600, 9, 0))
        self.queues = PoolQueues()
        self.states: dict[str, object] = {}
        self.ids = itertools.count()
        self.grants: list[tuple[int, str, str]] = []  # (at, tenant, job)

    def apply(self, p: int, command, now: int):
        before = self.states.get(command.job_id)
        after = fold(decide(before, command, now), before)
        self.states[command.job_id] = after
        self.parts[p].observe(before, after)
        for r in self.parts[p].ledger.take_reports(p, now):
            self.view.apply(r)
        return after

    def submit(self, tenant: str, partitions: set[int], now: int) -> str:
        while True:
            job = submit(f"{tenant}-{next(self.ids)}", tenant=tenant, model=MODEL, gpu_type=GPU)
            p = partition_for(job.job_id, PARTS)
            if p in partitions:
                self.apply(p, job, now)
                return job.job_id

    def usage(self, p: int, now: int):
        if not self.shared:
            return self.parts[p].usage(now)
        part = self.parts[p]
        return GlobalUsage(self.view, {p: lambda t: part.ledger.report(t, p, now)}, now, HOUR)

    def publish_stats(self, now: int) -> None:
        for p, part in self.parts.items():
            usage, policies = self.usage(p, now), self.view.policies() if self.shared else {}
            share_of = (lambda t: share_if_room(usage.get(t), policies.get(t))) if self.shared else (lambda t: None)
            for stats in pool_stats(part, now, share_of):
                self.queues.record(stats)

    def request(self, worker: str, now: int) -> str | None:
        offer = WorkerOffer(worker, GPU, frozenset({MODEL}))
        for p in request_order(worker, PARTS, self.queues.partitions_with_work((MODEL,))):
            part = self.parts[p]
            policies = self.view.policies() if self.shared else {}
            job_id = part.index.choose(offer, self.usage(p, now), policies, now, NO_AGING)
            if job_id is None:
                continue
            after = self.apply(p, c.GrantLease(f"g{next(self.ids)}", job_id, worker, POOL, 60_000), now)
            self.grants.append((now, after.tenant, job_id))
            return job_id
        return None

    def complete(self, job_id: str, now: int) -> None:
        s = self.states[job_id]
        self.apply(partition_for(job_id, PARTS), c.CompleteJob(f"d{next(self.ids)}", job_id, s.lease.epoch,
                                                              s.lease.worker_id, ids.artifact_key(job_id, 1),
                                                              "sha", 1), now)


def simulate(shared: bool, workers: int = 8, seconds: int = 120, newcomer_at: int = 80):
    cluster = Cluster({"a": 3.0, "b": 1.0, "c": 1.0}, shared=shared)
    for _ in range(350):  # more than either tenant can run in the time: both stay backlogged
        cluster.submit("a", {0, 1}, T0)
        cluster.submit("b", {2, 3}, T0)
    clock = [(T0 + i * 37, f"w{i}", None) for i in range(workers)]  # (time, worker, job it finishes)
    heapq.heapify(clock)
    next_stats, newcomer, end = T0, None, T0 + seconds * 1000
    while clock:
        now, worker, finished = heapq.heappop(clock)
        if now >= end:
            break
        while next_stats <= now:
            cluster.publish_stats(next_stats)
            next_stats += 1000
        if newcomer is None and now >= T0 + newcomer_at * 1000:
            newcomer = (cluster.submit("c", {0, 1, 2, 3} - {partition_for("w0", PARTS)}, now), len(cluster.grants))
        if finished is not None:
            cluster.complete(finished, now)
        job = cluster.request(worker, now)
        # Run times vary by up to 30% either way (a hash of the job: the same every run), as renders do.
        run_ms = RUN_MS * (0.7 + 0.6 * (int(job[1:9], 16) % 1000) / 1000) if job else 200
        heapq.heappush(clock, (now + int(run_ms), worker, job))
    used = {t: 0.0 for t in ("a", "b")}
    for s in cluster.states.values():
        if s.tenant in used:
            used[s.tenant] += s.render_ms
    share_a = used["a"] / (used["a"] + used["b"])
    grants_before_newcomer = next((i for i, (_, t, j) in enumerate(cluster.grants) if t == "c"), None)
    waited = None if grants_before_newcomer is None else grants_before_newcomer - newcomer[1]
    return share_a, waited


def test_weights_three_to_one_hold_across_partitions_that_never_see_both_tenants():
    share_a, waited = simulate(shared=True)
    assert share_a == pytest.approx(0.75, abs=0.05)
    # The newcomer's one job went to the pool's next free worker or nearly: within one turnover of the pool.
    assert waited is not None and waited < 8


def test_per_partition_usage_does_not_give_the_weights():
    """The baseline: each partition's own leases, equal weights, the most queued asked first."""
    share_a, _ = simulate(shared=False)
    assert abs(share_a - 0.75) > 0.15


def test_an_in_flight_ceiling_holds_across_partitions():
    cluster = Cluster({"a": 1.0, "b": 1.0})
    cluster.view.apply(ev.TenantSettings("a", "free", 1.0, 30, 4, 1, max_in_flight=2))
    for _ in range(20):
        cluster.submit("a", {0, 1, 2, 3}, T0)
    cluster.publish_stats(T0)
    leased = [cluster.request(f"w{i}", T0 + i) for i in range(6)]
    assert sum(j is not None for j in leased) == 2
    # Raised at runtime (a newer record): the next requests get work.
    cluster.view.apply(replace(ev.TenantSettings("a", "pro", 3.0, 600, 7, 2), max_in_flight=4))
    more = [cluster.request(f"x{i}", T0 + 100 + i) for i in range(6)]
    assert sum(j is not None for j in more) == 2


def test_the_view_keeps_the_newest_record_of_each_kind():
    view = FairShareView(Settings(partitions=PARTS), Codec.default())
    view.apply(ev.TenantUsageReport("a", 0, 200, 5.0, 1, 60.0))
    view.apply(ev.TenantUsageReport("a", 0, 100, 1.0, 0, 0.0))  # an older report read late
    assert view.reports("a")[0].at_ms == 200
    view.apply(ev.TenantSettings("a", "pro", 3.0, 600, 7, 10, max_in_flight=20))
    view.apply(ev.TenantSettings("a", "free", 1.0, 30, 4, 5, max_in_flight=2))  # older: ignored
    assert (view.policies()["a"].weight, view.policies()["a"].max_in_flight) == (3.0, 20)
    view.apply(ev.TenantSettings("a", "custom", 0.0, 600, 9, 20))  # unusable weight: the previous one stays
    assert view.policies()["a"].weight == 3.0
    # GlobalUsage: the owned partition's live report replaces the topic's, the others are summed.
    view.apply(ev.TenantUsageReport("a", 1, 200, 2.0, 1, 60.0))
    live = {0: lambda t: ev.TenantUsageReport(t, 0, 200, 10.0, 2, 120.0)}
    got = GlobalUsage(view, live, 200, None)["a"]
    assert (got.gpu_seconds, got.in_flight) == (10.0 + 120.0 + 2.0 + 60.0, 3)
