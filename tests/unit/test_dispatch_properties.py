"""Properties of choose over random queues, usages, policies and workers (small alphabets, so ties,
quota limits, overdue jobs and shared pools happen often)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.domain.aging import AgingPolicy, effective_priority, is_overdue
from spotreel.domain.dispatch import DispatchConfig, DispatchIndex, QueuedJob, choose
from spotreel.domain.fairness import TenantPolicy, TenantUsage, share
from spotreel.domain.pools import WorkerOffer

pytestmark = pytest.mark.unit

TENANTS = ("a", "b", "c")
MODELS = ("m1", "m2", "m3")
GPUS = ("g1", "g2")


def _jobs(rows: list[tuple[int, int, int, int, int]], seed: int) -> list[QueuedJob]:
    # Ids are shuffled against list order so that id order, list order and enqueue order all disagree.
    ids = [f"j{i:02d}" for i in range(len(rows))]
    random.Random(seed).shuffle(ids)
    return [
        QueuedJob(ids[i], TENANTS[t], prio, MODELS[m], GPUS[g], at, 1.0)
        for i, (t, prio, m, g, at) in enumerate(rows)
    ]


row = st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(0, 2), st.integers(0, 1), st.integers(0, 12))
queues = st.builds(_jobs, st.lists(row, max_size=25), st.integers(0, 2**16))


workers = st.builds(
    WorkerOffer,
    worker_id=st.just("w"),
    gpu_type=st.sampled_from(GPUS),
    models=st.frozensets(st.sampled_from(MODELS)),
    warm_models=st.frozensets(st.sampled_from(MODELS)),
    draining=st.booleans(),
)
usages = st.fixed_dictionaries(
    {},
    optional={
        t: st.builds(TenantUsage, st.just(t), st.sampled_from([0.0, 1.0, 2.0, 3.0, 6.0]), st.integers(0, 3))
        for t in TENANTS
    },
)
policies = st.fixed_dictionaries(
    {},
    optional={
        t: st.builds(TenantPolicy, st.sampled_from([1.0, 2.0, 3.0]), st.none() | st.integers(0, 3))
        for t in TENANTS
    },
)
configs = st.builds(
    DispatchConfig,
    aging=st.builds(AgingPolicy, st.none() | st.integers(1, 6), st.none() | st.integers(0, 2),
                    st.none() | st.integers(0, 15)),
    default_policy=st.builds(TenantPolicy, st.just(1.0), st.none() | st.integers(0, 2)),
    warm_share_slack=st.sampled_from([0.0, 1.0, 2.5]),
)
scenario = dict(jobs=queues, worker=workers, usage=usages, pols=policies, now=st.integers(0, 30), config=configs)
MANY = settings(max_examples=1_000, deadline=None)


def serves(worker: WorkerOffer, job: QueuedJob) -> bool:
    return job.gpu_type == worker.gpu_type and job.model in worker.models


def room(job, usage, pols, config) -> bool:
    limit = pols.get(job.tenant, config.default_policy).max_in_flight
    used = usage.get(job.tenant)
    return limit is None or (used.in_flight if used else 0) < limit


def eligible(worker, jobs, usage, pols, config):
    if worker.draining:
        return []
    return [j for j in jobs if serves(worker, j) and room(j, usage, pols, config)]


@MANY
@given(**scenario)
def test_never_another_pool_never_draining_never_over_quota(jobs, worker, usage, pols, now, config):
    picked = choose(worker, jobs, usage, pols, now, config)
    if worker.draining:
        assert picked is None
        return
    if picked is None:
        # Never idles a worker while something it may run is queued.
        assert eligible(worker, jobs, usage, pols, config) == []
        return
    job = next(j for j in jobs if j.job_id == picked)
    assert serves(worker, job)
    assert room(job, usage, pols, config)


@MANY
@given(**scenario, seed=st.integers(0, 2**32 - 1))
def test_deterministic_and_the_index_agrees(jobs, worker, usage, pols, now, config, seed):
    picked = choose(worker, jobs, usage, pols, now, config)
    shuffled = list(jobs)
    random.Random(seed).shuffle(shuffled)
    assert choose(worker, shuffled, usage, pols, now, config) == picked
    assert choose(worker, jobs, dict(reversed(list(usage.items()))), pols, now, config) == picked
    assert DispatchIndex(shuffled).choose(worker, usage, pols, now, config) == picked


@MANY
@given(**scenario)
def test_the_rule_overdue_then_share_then_top_tier(jobs, worker, usage, pols, now, config):
    picked = choose(worker, jobs, usage, pols, now, config)
    candidates = eligible(worker, jobs, usage, pols, config)
    if picked is None:
        return
    job = next(j for j in jobs if j.job_id == picked)
    overdue = [j for j in candidates if is_overdue(j.enqueued_at_ms, now, config.aging)]
    if overdue:
        assert job == min(overdue, key=lambda j: (j.enqueued_at_ms, j.job_id))
        return
    shares = {j.tenant: share(usage.get(j.tenant), pols.get(j.tenant, config.default_policy)) for j in candidates}
    assert shares[job.tenant] <= min(shares.values()) + config.warm_share_slack
    if not worker.warm_models:
        assert shares[job.tenant] == min(shares.values())
    eff = {j.job_id: effective_priority(j.priority, j.enqueued_at_ms, now, config.aging) for j in candidates}
    assert eff[picked] == max(eff[j.job_id] for j in candidates if j.tenant == job.tenant)
    if job.model not in worker.warm_models:
        # A cold pick means nothing warm was on offer at that tenant's top tier.
        same = [j for j in candidates if j.tenant == job.tenant and eff[j.job_id] == eff[picked]]
        assert all(j.model not in worker.warm_models for j in same)
        assert (job.enqueued_at_ms, job.job_id) == min((j.enqueued_at_ms, j.job_id) for j in same)


ops = st.lists(
    st.tuples(st.sampled_from(["add", "discard"]), st.integers(0, 15), st.sampled_from(TENANTS),
              st.integers(0, 2), st.sampled_from(MODELS), st.integers(0, 9)),
    max_size=40,
)


@settings(max_examples=500, deadline=None)
@given(ops=ops, worker=workers, usage=usages, pols=policies, now=st.integers(0, 30), config=configs)
def test_index_matches_a_full_scan_after_any_updates(ops, worker, usage, pols, now, config):
    index, live = DispatchIndex(), {}
    for op, n, tenant, prio, model, at in ops:
        job_id = f"j{n}"
        if op == "add":
            live[job_id] = QueuedJob(job_id, tenant, prio, model, "g1", at, 1.0)
            index.add(live[job_id])
        else:
            assert index.discard(job_id) == live.pop(job_id, None)
    assert len(index) == len(live)
    for model in MODELS:
        pool = QueuedJob("x", "a", 0, model, "g1", 0).pool
        assert index.depth(pool) == sum(1 for j in live.values() if j.pool == pool)
    assert index.choose(worker, usage, pols, now, config) == choose(worker, live.values(), usage, pols, now, config)
