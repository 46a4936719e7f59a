"""Properties of choose over random queues, usages, policies and workers (small alphabets, so ties,
quota limits, overdue jobs and shared pools happen often)."""

from __future__ import annotations

import random

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from spotreel.domain.aging import AgingPolicy, effective_priority, is_overdue
from spotreel.domain.job_choice import DispatchConfig, DispatchIndex, QueuedJob, choose
from spotreel.domain.fairness import TenantAccount, TenantPolicy, TenantUsage, share
from spotreel.domain.pools import WorkerOffer
from tests.harness.hypothesis_profiles import examples

pytestmark = pytest.mark.unit

TENANTS = ("a", "b", "c")
MODELS = ("m1", "m2", "m3")
GPUS = ("g1", "g2")


def _jobs(codes: list[int], seed: int) -> list[QueuedJob]:
    # One integer per job keeps generation cheap; smaller codes still shrink towards simpler jobs.
    # Ids are shuffled against list order so that id order, list order and enqueue order all disagree.
    ids = [f"j{i:02d}" for i in range(len(codes))]
    random.Random(seed).shuffle(ids)
    jobs = []
    for job_id, code in zip(ids, codes):
        code, at = divmod(code, 13)
        code, prio = divmod(code, 4)
        code, tenant = divmod(code, 3)
        gpu, model = divmod(code, 3)
        jobs.append(QueuedJob(job_id, TENANTS[tenant], prio, MODELS[model], GPUS[gpu], at, 1.0))
    return jobs


def _usages(codes: tuple[int, ...]) -> dict[str, TenantUsage]:
    # 0: no usage recorded for the tenant; otherwise a gpu_seconds level and an in-flight count.
    levels = (0.0, 1.0, 2.0, 3.0, 6.0)
    return {t: TenantUsage(t, levels[(c - 1) // 4], (c - 1) % 4) for t, c in zip(TENANTS, codes) if c}


def _policies(codes: tuple[int, ...]) -> dict[str, TenantPolicy]:
    limits = (None, None, 0, 1, 2, 3)
    return {t: TenantPolicy(float(1 + (c - 1) // 6), limits[(c - 1) % 6]) for t, c in zip(TENANTS, codes) if c}


def _models(mask: int) -> frozenset[str]:
    return frozenset(m for i, m in enumerate(MODELS) if mask >> i & 1)


def _worker(gpu: int, models: int, warm: int, draining: bool) -> WorkerOffer:
    return WorkerOffer("w", GPUS[gpu], _models(models), _models(warm), draining)


def maybe(lo: int, hi: int) -> st.SearchStrategy[int | None]:
    return st.integers(lo - 1, hi).map(lambda v: None if v < lo else v)


JOB_CODES = 13 * 4 * 3 * 3 * 2  # enqueue times x priorities x tenants x models x GPU types
queues = st.builds(_jobs, st.lists(st.integers(0, JOB_CODES - 1), min_size=1, max_size=25), st.integers(0, 2**16))
# Draining about one time in eight: often enough to test, rarely enough to keep most examples interesting.
workers = st.builds(
    _worker, st.integers(0, 1), st.integers(1, 7), st.integers(0, 7), st.sampled_from([False] * 7 + [True])
)
usages = st.builds(_usages, st.tuples(*[st.integers(0, 20)] * 3))
policies = st.builds(_policies, st.tuples(*[st.integers(0, 18)] * 3))
configs = st.builds(
    DispatchConfig,
    aging=st.builds(AgingPolicy, maybe(1, 6), maybe(0, 2), maybe(0, 15)),
    default_policy=st.builds(TenantPolicy, st.just(1.0), maybe(1, 3)),
    warm_share_slack=st.sampled_from([0.0, 1.0, 2.5]),
    model_affinity=st.booleans(),
)
scenario = dict(jobs=queues, worker=workers, usage=usages, pols=policies, now=st.integers(0, 30), config=configs)
MANY = settings(max_examples=examples(1_000), deadline=None)


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
def test_the_rule_overdue_then_top_tier_then_share_then_age(jobs, worker, usage, pols, now, config):
    picked = choose(worker, jobs, usage, pols, now, config)
    candidates = eligible(worker, jobs, usage, pols, config)
    if picked is None:
        event("nothing eligible")
        return
    job = next(j for j in jobs if j.job_id == picked)
    event(f"from {len({j.tenant for j in candidates})} eligible tenant(s), warm={job.model in worker.warm_models}")
    overdue = [j for j in candidates if is_overdue(j.enqueued_at_ms, now, config.aging)]
    if overdue:
        event("overdue")
        assert job == min(overdue, key=lambda j: (j.enqueued_at_ms, j.job_id))
        return
    if config.model_affinity and worker.warm_models:
        warm = [j for j in candidates if j.model in worker.warm_models]
        # Model affinity: a switch (a cold job) only when the loaded models have no candidate here.
        assert (job.model in worker.warm_models) == bool(warm)
        if warm:
            event("affinity kept the worker on its model")
            candidates = warm
    eff = {j.job_id: effective_priority(j.priority, j.enqueued_at_ms, now, config.aging) for j in candidates}
    # Strict tiers across tenants: nothing on offer has a higher effective tier than the pick.
    assert eff[picked] == max(eff.values())
    top = [j for j in candidates if eff[j.job_id] == eff[picked]]
    shares = {j.tenant: share(usage.get(j.tenant), pols.get(j.tenant, config.default_policy)) for j in top}
    assert shares[job.tenant] <= min(shares.values()) + config.warm_share_slack
    if not worker.warm_models:
        assert shares[job.tenant] == min(shares.values())
    if job.model not in worker.warm_models:
        # A cold pick means nothing warm was on offer at that tenant's top tier.
        same = [j for j in top if j.tenant == job.tenant]
        assert all(j.model not in worker.warm_models for j in same)
        assert (job.enqueued_at_ms, job.job_id) == min((j.enqueued_at_ms, j.job_id) for j in same)


ops = st.lists(
    st.tuples(st.sampled_from(["add", "discard"]), st.integers(0, 15), st.sampled_from(TENANTS),
              st.integers(0, 2), st.sampled_from(MODELS), st.integers(0, 9)),
    max_size=40,
)


@settings(max_examples=examples(500), deadline=None)
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
    expected = choose(worker, live.values(), usage, pols, now, config)
    assert index.choose(worker, usage, pols, now, config) == expected


@settings(max_examples=examples(300), deadline=None)
@given(jobs=queues, pols=policies, config=configs, requests=st.integers(1, 30))
def test_a_burst_of_requests_never_pushes_a_tenant_past_its_quota(jobs, pols, config, requests):
    # Many idle workers ask at the same instant; each answer is charged before the next question, as the
    # scheduler does. No tenant may end up with more in flight than its max_in_flight.
    worker = WorkerOffer("w", "g1", frozenset(MODELS))
    index = DispatchIndex(jobs)
    accounts: dict[str, TenantAccount] = {}
    for _ in range(requests):
        usage = {t: a.usage(20, None) for t, a in accounts.items()}
        picked = index.choose(worker, usage, pols, 20, config)
        if picked is None:
            break
        job = index.discard(picked)
        accounts[job.tenant] = accounts.get(job.tenant, TenantAccount(job.tenant)).on_dispatch(1.0)
        limit = pols.get(job.tenant, config.default_policy).max_in_flight
        assert limit is None or accounts[job.tenant].in_flight <= limit
