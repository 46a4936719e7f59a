"""Dispatch rule by example: pools, draining, tiers, quotas, warm preference, tie-breaks, the index."""

from __future__ import annotations

import random
import time

import pytest

from spotreel.domain.aging import AgingPolicy
from spotreel.domain.job_choice import DispatchConfig, DispatchIndex, QueuedJob, choose
from spotreel.domain.fairness import TenantPolicy, TenantUsage
from spotreel.domain.pools import Pool, WorkerOffer

pytestmark = pytest.mark.unit

NO_AGING = DispatchConfig(aging=AgingPolicy(step_ms=None, max_wait_ms=None))


def job(job_id: str, tenant: str = "a", priority: int = 0, model: str = "m1", gpu: str = "h100",
        at: int = 0, est: float = 60.0) -> QueuedJob:
    return QueuedJob(job_id, tenant, priority, model, gpu, at, est)


def worker(models=("m1",), gpu: str = "h100", warm=(), draining: bool = False) -> WorkerOffer:
    return WorkerOffer("w1", gpu, frozenset(models), frozenset(warm), draining)


def both(w: WorkerOffer, jobs, usage=None, policies=None, now: int = 0, config=NO_AGING) -> str | None:
    """Ask the scan and the index; they must agree on every example."""
    usage, policies = usage or {}, policies or {}
    scanned = choose(w, jobs, usage, policies, now, config)
    assert DispatchIndex(jobs).choose(w, usage, policies, now, config) == scanned
    return scanned


def test_worker_only_gets_jobs_of_its_pools():
    jobs = [job("other-gpu", gpu="a100", at=0), job("other-model", model="m2", at=1), job("mine", at=2)]
    assert both(worker(), jobs) == "mine"
    assert both(worker(models=("m1", "m2")), jobs) == "other-model"
    assert both(worker(gpu="a100"), jobs) == "other-gpu"
    assert both(worker(gpu="l4"), jobs) is None
    assert both(worker(models=("m3",)), jobs) is None


def test_pools_are_model_by_gpu_type():
    w = worker(models=("m2", "m1"))
    assert w.pools == (Pool("m1", "h100"), Pool("m2", "h100"))
    assert w.serves(Pool("m1", "h100")) and not w.serves(Pool("m1", "a100"))
    assert job("x", model="m2", gpu="l4").pool == Pool("m2", "l4")


def test_draining_worker_gets_nothing():
    w = worker(draining=True)
    assert not w.serves(Pool("m1", "h100"))
    assert both(w, [job("x")]) is None
    assert list(DispatchIndex([job("x")]).heads(w)) == []


def test_empty_queue_gives_none():
    assert both(worker(), []) is None


def test_strict_priority_tiers_inside_a_tenant():
    jobs = [job("low-old", priority=1, at=0), job("high-new", priority=5, at=999), job("mid", priority=3, at=5)]
    order = []
    remaining = list(jobs)
    while remaining:
        picked = both(worker(), remaining, now=10_000)
        order.append(picked)
        remaining = [j for j in remaining if j.job_id != picked]
    assert order == ["high-new", "mid", "low-old"]


def test_tiers_cross_tenants_and_share_decides_within_a_tier():
    # a's priority-9 job goes first although b is further below its share: tiers are strict in the pool.
    jobs = [job("a-urgent", tenant="a", priority=9), job("b-low", tenant="b", priority=0)]
    usage = {"a": TenantUsage("a", 100.0), "b": TenantUsage("b", 10.0)}
    assert both(worker(), jobs, usage) == "a-urgent"
    # Within one tier, the tenant further below its share wins.
    same = [job("a-top", tenant="a", priority=5), job("b-top", tenant="b", priority=5, at=9)]
    assert both(worker(), same, usage) == "b-top"


def test_weights_scale_usage_into_share():
    jobs = [job("a1", tenant="a", at=0), job("b1", tenant="b", at=1)]
    usage = {"a": TenantUsage("a", 300.0), "b": TenantUsage("b", 120.0)}
    assert both(worker(), jobs, usage) == "b1"
    # a has three times the weight: share 100 against b's 120.
    assert both(worker(), jobs, usage, {"a": TenantPolicy(weight=3.0)}) == "a1"


def test_deterministic_tie_break_enqueue_time_then_job_id():
    jobs = [job("c", at=5), job("b", at=3), job("a", at=3)]
    assert both(worker(), jobs) == "a"
    assert both(worker(), list(reversed(jobs))) == "a"
    # Equal shares across tenants: the tenant whose best job is older wins, then the smaller job id.
    tenants = [job("y1", tenant="y", at=7), job("x1", tenant="x", at=8)]
    assert both(worker(), tenants) == "y1"
    tied = [job("y1", tenant="y", at=7), job("x1", tenant="x", at=7)]
    assert both(worker(), tied) == "x1"


def test_in_flight_quota_blocks_a_tenant_at_its_limit():
    jobs = [job("a1", tenant="a", priority=9, at=0), job("b1", tenant="b", at=1)]
    usage = {"a": TenantUsage("a", 0.0, in_flight=2)}
    policies = {"a": TenantPolicy(max_in_flight=2)}
    assert both(worker(), jobs, usage, policies) == "b1"
    assert both(worker(), jobs[:1], usage, policies) is None
    assert both(worker(), jobs[:1], {"a": TenantUsage("a", 0.0, in_flight=1)}, policies) == "a1"


def test_quota_zero_means_paused_and_default_policy_applies():
    config = DispatchConfig(aging=NO_AGING.aging, default_policy=TenantPolicy(max_in_flight=1))
    usage = {"a": TenantUsage("a", 0.0, in_flight=1)}
    assert both(worker(), [job("a1")], usage, config=config) is None
    assert both(worker(), [job("a1")], {}, {"a": TenantPolicy(max_in_flight=0)}) is None


def test_quota_holds_even_for_overdue_jobs():
    config = DispatchConfig(aging=AgingPolicy(step_ms=None, max_wait_ms=100))
    usage = {"a": TenantUsage("a", 0.0, in_flight=1)}
    jobs = [job("a-ancient", tenant="a", at=0), job("b-fresh", tenant="b", at=10_000)]
    picked = both(worker(), jobs, usage, {"a": TenantPolicy(max_in_flight=1)}, now=10_000, config=config)
    assert picked == "b-fresh"


def test_warm_model_preferred_within_the_top_tier():
    w = worker(models=("m1", "m2"), warm=("m2",))
    jobs = [job("cold-older", model="m1", priority=3, at=0), job("warm-newer", model="m2", priority=3, at=50)]
    assert both(w, jobs) == "warm-newer"
    assert both(worker(models=("m1", "m2")), jobs) == "cold-older"


SOFT = DispatchConfig(aging=NO_AGING.aging, model_affinity=False)  # the warm preference alone (rule 5)


def test_warm_model_never_beats_a_higher_tier():
    w = worker(models=("m1", "m2"), warm=("m2",))
    jobs = [job("cold-high", model="m1", priority=4), job("warm-low", model="m2", priority=3)]
    assert both(w, jobs, config=SOFT) == "cold-high"


def test_warm_model_breaks_exact_share_ties_across_tenants_only():
    w = worker(models=("m1", "m2"), warm=("m2",))
    jobs = [job("a-cold", tenant="a", model="m1", at=0), job("b-warm", tenant="b", model="m2", at=9)]
    assert both(w, jobs, config=SOFT) == "b-warm"
    behind = {"a": TenantUsage("a", 10.0), "b": TenantUsage("b", 11.0)}
    assert both(w, jobs, behind, config=SOFT) == "a-cold"


def test_warm_share_slack_widens_what_counts_as_close():
    w = worker(models=("m1", "m2"), warm=("m2",))
    jobs = [job("a-cold", tenant="a", model="m1", at=0), job("b-warm", tenant="b", model="m2", at=9)]
    usage = {"a": TenantUsage("a", 10.0), "b": TenantUsage("b", 11.0)}
    slack = DispatchConfig(aging=NO_AGING.aging, warm_share_slack=1.5, model_affinity=False)
    assert both(w, jobs, usage, config=slack) == "b-warm"
    tight = DispatchConfig(aging=NO_AGING.aging, warm_share_slack=0.5, model_affinity=False)
    assert both(w, jobs, usage, config=tight) == "a-cold"


def test_a_worker_stays_with_its_loaded_model_while_that_model_has_work():
    """Model affinity (rule 4): the loaded model's jobs first, over a higher tier and a tenant further
    below its share of another model; a switch only when the loaded model has nothing this worker may run."""
    w = worker(models=("m1", "m2"), warm=("m2",))
    usage = {"a": TenantUsage("a", 0.0), "b": TenantUsage("b", 50.0)}
    jobs = [job("a-cold-high", tenant="a", model="m1", priority=9, at=0),
            job("b-warm-low", tenant="b", model="m2", priority=0, at=5)]
    assert both(w, jobs, usage) == "b-warm-low"
    assert both(w, jobs, usage, config=SOFT) == "a-cold-high"  # without affinity: share, then tier
    # nothing of m2 left: the worker may switch
    assert both(w, jobs[:1], usage) == "a-cold-high"
    # m2's only job belongs to a tenant at its in-flight ceiling: not a candidate, so the worker switches
    full = {"b": TenantPolicy(max_in_flight=1)}
    busy = {**usage, "b": TenantUsage("b", 50.0, 1)}
    assert both(w, jobs, busy, full) == "a-cold-high"
    # fair share and tiers still order the loaded model's jobs among themselves
    more = [*jobs, job("a-warm", tenant="a", model="m2", priority=1, at=7)]
    assert both(w, more, usage) == "a-warm"
    # a worker with nothing loaded, or everything loaded, sees the plain rule
    assert both(worker(models=("m1", "m2")), jobs, usage) == "a-cold-high"
    assert both(worker(models=("m1", "m2"), warm=("m1", "m2")), jobs, usage) == "a-cold-high"


def test_overdue_job_beats_priority_share_and_warmth():
    config = DispatchConfig(aging=AgingPolicy(step_ms=None, max_wait_ms=1_000))
    w = worker(models=("m1", "m2"), warm=("m2",))
    jobs = [
        job("old-low", tenant="hog", priority=0, model="m1", at=0),
        job("fresh-high", tenant="light", priority=9, model="m2", at=900),
    ]
    usage = {"hog": TenantUsage("hog", 1e6), "light": TenantUsage("light", 0.0)}
    assert both(w, jobs, usage, now=999, config=config) == "fresh-high"
    assert both(w, jobs, usage, now=1_000, config=config) == "old-low"


def test_config_validation():
    with pytest.raises(ValueError, match="warm_share_slack"):
        DispatchConfig(warm_share_slack=-1.0)
    with pytest.raises(ValueError, match="weight"):
        TenantPolicy(weight=0.0)
    with pytest.raises(ValueError, match="max_in_flight"):
        TenantPolicy(max_in_flight=-1)


def test_worker_offer_accepts_any_iterable():
    w = WorkerOffer("w", "h100", ["m1", "m1"], ["m1"])
    assert w.models == frozenset({"m1"}) and w.is_warm(Pool("m1", "h100"))
    assert not w.is_warm(Pool("m1", "a100"))


def test_index_add_replace_discard_and_depth():
    index = DispatchIndex()
    a, b = job("a", at=1), job("b", at=2, model="m2")
    index.add(a)
    index.add(b)
    assert len(index) == 2 and "a" in index and index.get("b") == b
    assert index.depth(Pool("m1", "h100")) == 1 and index.depth(Pool("m2", "h100")) == 1
    # Re-adding the same id replaces it (a reprioritized job), it does not duplicate it.
    index.add(job("a", at=1, priority=7))
    assert len(index) == 2 and index.get("a").priority == 7 and index.depth(Pool("m1", "h100")) == 1
    assert index.discard("a").priority == 7
    assert index.discard("a") is None
    assert index.depth(Pool("m1", "h100")) == 0
    assert index.choose(worker(models=("m1", "m2")), {}, {}, 0, NO_AGING) == "b"
    index.discard("b")
    assert len(index) == 0 and index.choose(worker(), {}, {}, 0) is None


def test_index_heads_are_one_per_pool_tenant_priority_queue():
    jobs = [job(f"j{i}", tenant=t, priority=p, at=i) for i, (t, p) in enumerate(
        [("a", 1), ("a", 1), ("a", 2), ("b", 1), ("b", 1)])]
    heads = sorted(j.job_id for j in DispatchIndex(jobs).heads(worker()))
    assert heads == ["j0", "j2", "j3"]


def test_default_config_is_used_when_none_given():
    assert choose(worker(), [job("x")], {}, {}, 0) == "x"


def test_index_choose_is_fast_at_ten_thousand_jobs():
    rng = random.Random(7)
    jobs = [
        job(f"j{i:05d}", tenant=f"t{rng.randrange(100)}", priority=rng.randrange(5),
            model=f"m{rng.randrange(3)}", at=rng.randrange(1_000_000))
        for i in range(10_000)
    ]
    usage = {f"t{i}": TenantUsage(f"t{i}", float(rng.randrange(1000)), rng.randrange(3)) for i in range(100)}
    policies = {f"t{i}": TenantPolicy(weight=1 + i % 3, max_in_flight=2) for i in range(100)}
    w = worker(models=("m0", "m1", "m2"), warm=("m1",))
    index = DispatchIndex(jobs)
    config = DispatchConfig()
    started = time.perf_counter()
    for _ in range(50):
        picked = index.choose(w, usage, policies, 1_000_000, config)
    per_call = (time.perf_counter() - started) / 50
    assert picked == choose(w, jobs, usage, policies, 1_000_000, config)
    # ~1.5k queue heads; generous so a loaded CI box does not flake.
    assert per_call < 0.05
