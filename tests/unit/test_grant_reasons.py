"""Why a grant went to its job: the reasons recorded on the JobLeased (domain/grant_reasons.py), their
agreement with dispatch's rule (a hypothesis property), and `replay --why`'s sentence."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.domain import commands as c
from spotreel.domain.aging import AgingPolicy
from spotreel.domain.job_choice import DispatchConfig, DispatchIndex, QueuedJob
from spotreel.domain.fairness import TenantPolicy, TenantUsage
from spotreel.domain.grant_reasons import reasons
from spotreel.domain.pools import WorkerOffer
from spotreel.services.scheduler.handler import why_fields
from spotreel.services.scheduler.replay import grant_why
from tests.unit.jobkit import Driver
from tests.harness.hypothesis_profiles import examples

pytestmark = pytest.mark.unit

NOW = 10_000_000
CFG = DispatchConfig(aging=AgingPolicy(step_ms=60_000, max_wait_ms=30 * 60_000))
WORKER = WorkerOffer("w1", "h100", frozenset({"m"}), frozenset({"m"}))


def job(job_id: str, tenant: str, priority: int, waited_ms: int) -> QueuedJob:
    return QueuedJob(job_id, tenant, priority, "m", "h100", NOW - waited_ms)


def test_the_reasons_name_the_tier_with_its_aging_credit_the_shares_and_the_warm_model() -> None:
    # a1's two aging steps lift it to b1's tier (5), where a is further below its share; c is at its ceiling.
    jobs = [job("a1", "a", 3, 125_000), job("b1", "b", 5, 1_000), job("c1", "c", 1, 0)]
    usage = {"a": TenantUsage("a", 30.0, 1), "b": TenantUsage("b", 90.0, 2), "c": TenantUsage("c", 0.0, 5)}
    policies = {"a": TenantPolicy(3.0), "b": TenantPolicy(1.0), "c": TenantPolicy(1.0, max_in_flight=5)}
    index = DispatchIndex(jobs)
    assert index.choose(WORKER, usage, policies, NOW, CFG) == "a1"  # c is at its ceiling, b is further over
    r = reasons(jobs[0], WORKER, index.heads(WORKER), usage, policies, NOW, CFG)
    assert (r.effective_priority, r.overdue, r.waited_ms) == (5.0, False, 125_000)  # 3 + two aging steps
    assert (r.share, r.next_share, r.weight, r.warm, r.candidates) == (10.0, 90.0, 3.0, True, 3)
    line = grant_why(3, c.GrantLease("g", "a1", "w1", "m@h100", 30_000, **why_fields(r)))  # type: ignore[arg-type]
    assert "priority 3 (+2 aging credit)" in line and "furthest below its fair share" in line
    assert "model warm" in line


def test_a_grant_copies_its_reasons_onto_the_job_leased_event() -> None:
    d = Driver()
    d.submit(priority=4)
    r = reasons(QueuedJob(d.job_id, "acme", 4, "tiny-t2v", "h100", d.now), WORKER, [], {}, {}, d.now + 1_000, CFG)
    leased = d.send(c.GrantLease("g", d.job_id, "w1", d.s.pool, 30_000, **why_fields(r)), advance=1_000)[0]
    assert (leased.why_priority, leased.why_waited_ms, leased.why_next_share, leased.why_candidates) == (4.0, 1_000,
                                                                                                           None, 0)
    assert "only one with a candidate" in grant_why(4, leased)
    plain = Driver()
    plain.submit()
    assert "no reasons recorded" in grant_why(0, plain.grant()[0])


queued = st.lists(st.builds(QueuedJob, job_id=st.text("abcdefgh", min_size=2, max_size=4),
                            tenant=st.sampled_from(["t1", "t2", "t3"]), priority=st.integers(0, 9),
                            model=st.just("m"), gpu_type=st.just("h100"),
                            enqueued_at_ms=st.integers(NOW - 40 * 60_000, NOW)),
                  min_size=1, max_size=12, unique_by=lambda j: j.job_id)
usages = st.fixed_dictionaries({t: st.builds(TenantUsage, st.just(t), st.floats(0, 1000), st.integers(0, 3))
                                for t in ("t1", "t2", "t3")})
policy_sets = st.fixed_dictionaries({t: st.builds(TenantPolicy, st.floats(0.5, 4), st.one_of(st.none(), st.integers(1, 4)))
                                     for t in ("t1", "t2", "t3")})


@settings(max_examples=examples(300), deadline=None)
@given(queued, usages, policy_sets)
def test_the_recorded_reasons_agree_with_the_rule_that_chose(jobs, usage, policies) -> None:
    """Without warm models, the chosen job is overdue, or its tenant's share is the smallest among the tenants
    that could take the worker: what `replay --why` prints is what decided."""
    cold = WorkerOffer("w", "h100", frozenset({"m"}))
    config = DispatchConfig(aging=AgingPolicy(step_ms=60_000, max_wait_ms=30 * 60_000), model_affinity=False)
    index = DispatchIndex(jobs)
    picked = index.choose(cold, usage, policies, NOW, config)
    if picked is None:
        return
    r = reasons(index.get(picked), cold, index.heads(cold), usage, policies, NOW, config)
    assert not r.warm and r.candidates >= 1
    assert r.overdue or r.next_share is None or r.share <= r.next_share
