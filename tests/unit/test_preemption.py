"""Priority preemption: the job's side (PreemptLease -> checkpoint-and-release -> requeued, no attempt or
preemption budget spent, never twice in a row) and the planner's laws (budget, age, tier) as properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.domain import commands as c
from spotreel.domain.preemption import (MINUTE_MS, Budget, Demand, Running, eligible, may_yield, plan, plan_fair, room,
                                        unserved)
from spotreel.domain.state import Status
from tests.unit.jobkit import leased_job, rejection, kinds
from tests.harness.hypothesis_profiles import examples

pytestmark = pytest.mark.unit


def _preempt(d, for_priority: int = 9, epoch: int | None = None):
    return d.send(c.PreemptLease(d.next_id("preempt"), d.job_id, d.s.epoch if epoch is None else epoch, for_priority))


def test_preempt_asks_the_holder_to_drain_and_its_release_requeues_without_spending_budgets() -> None:
    d = leased_job(priority=1)
    d.progress(30.0, step=6)
    out = _preempt(d)
    assert kinds(out) == ["PreemptRequested"] and out[0].for_priority == 9 and out[0].epoch == 1
    assert d.s.preempt_requested
    # The holder hears it on its next renewal, exactly as for a pause.
    assert d.renew()[0].drain_requested is True
    d.checkpoint(6, 30.0)
    attempts, preemptions = d.s.attempts_used, d.s.preemptions
    out = d.release(reason="paused")  # what a draining worker sends
    assert kinds(out) == ["LeaseReleased", "JobRequeued"]
    assert out[0].reason == out[1].reason == "preempted_for"
    assert d.s.status == Status.QUEUED and not d.s.preempt_requested and d.s.preempted_last
    assert (d.s.attempts_used, d.s.preemptions) == (attempts, preemptions)
    # The next lease resumes from the checkpoint written on the way out.
    leased = d.grant("w2")[0]
    assert leased.resume_step == 6 and leased.attempt == 2
    assert d.renew()[0].drain_requested is False


def test_preempt_is_refused_for_equal_or_higher_tiers_stale_epochs_and_jobs_already_asked() -> None:
    d = leased_job(priority=5)
    assert rejection(_preempt(d, for_priority=5)) == "not_lower_tier"
    assert rejection(_preempt(d, for_priority=9, epoch=0)) == "stale_epoch"
    _preempt(d)
    assert rejection(_preempt(d)) == "preempt_requested"
    p = leased_job(priority=1)
    p.pause()
    assert rejection(_preempt(p)) == "pause_requested"
    q = leased_job(priority=1)
    q.send(c.CancelJob("cancel", q.job_id))
    assert rejection(_preempt(q)) == "cancel_requested"


def test_a_preempted_holder_that_goes_silent_loses_its_lease_as_usual_and_a_completion_still_counts() -> None:
    d = leased_job(priority=1)
    _preempt(d)
    out = d.expire()
    assert kinds(out) == ["LeaseExpired", "JobRequeued"] and out[1].reason == "lease_expired"
    assert d.s.preemptions == 1 and not d.s.preempted_last and not d.s.preempt_requested
    e = leased_job(priority=1)
    _preempt(e)
    assert kinds(e.complete()) == ["JobSucceeded"]


def test_pause_wins_over_a_pending_preemption() -> None:
    d = leased_job(priority=1)
    _preempt(d)
    d.pause()
    out = d.release(reason="paused")
    assert kinds(out) == ["LeaseReleased", "JobPaused"] and out[0].reason == "paused"


# -- the planner ------------------------------------------------------------------------------------------

NOW = 10_000_000
B = Budget(per_minute=2, min_run_ms=30_000)


def run(job: str, prio: int, age_ms: int = 60_000, **kw) -> Running:
    return Running(job, 1, prio, NOW - age_ms, **kw)


def test_plan_takes_the_lowest_tier_then_the_youngest_eligible_lease() -> None:
    running = [run("a", 1, 100_000), run("b", 1, 40_000), run("c", 0, 10_000), run("d", 3)]
    got = plan(Demand({9: 1}), running, [], NOW, B)
    # c is the lowest tier but younger than min_run: b (tier 1, started last among the eligible) goes.
    assert [(p.job_id, p.for_priority) for p in got] == [("b", 9)]


def test_plan_discounts_free_workers_and_leases_already_yielding() -> None:
    running = [run("a", 1), run("b", 1), run("c", 1)]
    assert plan(Demand({9: 2}, free_workers=1), running, [], NOW, B) == plan(Demand({9: 1}), running, [], NOW, B)
    assert plan(Demand({9: 2}, free_workers=1, yielding=1), running, [], NOW, B) == ()
    assert unserved(Demand({9: 1, 5: 2, 1: 1}, free_workers=1)) == [5, 5, 1]


def test_plan_respects_the_rolling_minute_and_never_repeats_a_job() -> None:
    running = [run("a", 1), run("b", 1, preempted_last=True), run("c", 1, asked=True)]
    assert plan(Demand({9: 3}), running, [NOW - 1_000, NOW - 2_000], NOW, B) == ()
    assert room([NOW - MINUTE_MS, NOW - 1_000], NOW, B) == 1  # the first fell out of the window
    assert [p.job_id for p in plan(Demand({9: 3}), running, [], NOW, B)] == ["a"]


tiers = st.integers(min_value=0, max_value=9)
leases = st.lists(st.builds(Running, job_id=st.text("abcdef", min_size=1, max_size=3), epoch=st.integers(1, 5),
                            priority=tiers, started_ms=st.integers(NOW - 3 * MINUTE_MS, NOW),
                            asked=st.booleans(), preempted_last=st.booleans()),
                  max_size=12, unique_by=lambda r: r.job_id)
demands = st.builds(Demand, waiting_by_tier=st.dictionaries(tiers, st.integers(0, 6), max_size=5),
                    free_workers=st.integers(0, 4), yielding=st.integers(0, 4))
budgets = st.builds(Budget, per_minute=st.integers(0, 5), min_run_ms=st.integers(0, 2 * MINUTE_MS))
recents = st.lists(st.integers(NOW - 2 * MINUTE_MS, NOW), max_size=8)


@settings(max_examples=examples(300), deadline=None)
@given(demands, leases, recents, budgets)
def test_plan_never_exceeds_the_budget_nor_picks_a_young_equal_or_higher_tier_or_repeated_job(
        demand, running, recent, budget) -> None:
    got = plan(demand, running, recent, NOW, budget)
    by_id = {r.job_id: r for r in running}
    # Within the rolling minute: the requests made before plus these never exceed per_minute.
    in_window = sum(1 for t in recent if NOW - MINUTE_MS < t <= NOW)
    assert len(got) <= max(0, budget.per_minute - in_window)
    assert len({p.job_id for p in got}) == len(got)
    assert len(got) <= len(unserved(demand))
    for p in got:
        r = by_id[p.job_id]
        assert NOW - r.started_ms >= budget.min_run_ms
        assert r.priority < p.for_priority and not r.preempted_last and not r.asked
        assert p.epoch == r.epoch and eligible(r, p.for_priority, NOW, budget)


@settings(max_examples=examples(200), deadline=None)
@given(demands, leases, budgets)
def test_plan_asks_for_a_lease_whenever_an_unserved_job_outranks_an_eligible_one(demand, running, budget) -> None:
    got = plan(demand, running, [], NOW, budget)
    top = unserved(demand)[:1]
    if budget.per_minute > 0 and top and any(eligible(r, top[0], NOW, budget) for r in running):
        assert got and got[0].for_priority == top[0]


# -- fair-share preemption -------------------------------------------------------------------------------


def test_a_fair_share_preemption_needs_no_lower_tier_and_requeues_as_preempted_for() -> None:
    d = leased_job(priority=9)
    out = d.send(c.PreemptLease("fs", d.job_id, 1, -1, "fair_share"))
    assert kinds(out) == ["PreemptRequested"] and out[0].reason == "fair_share"
    out = d.release(reason="paused")
    assert out[0].reason == out[1].reason == "preempted_for" and d.s.preempted_last


def test_plan_fair_takes_the_most_over_served_tenants_youngest_lowest_tier_lease() -> None:
    running = [run("a1", 5, tenant="a"), run("a2", 1, 40_000, tenant="a"), run("b1", 0, tenant="b")]
    shares = {"a": 300.0, "b": 50.0}
    got = plan_fair({"c": 0.0}, shares, running, 0, 0, [], NOW, B, 2)
    assert [(p.job_id, p.reason, p.for_tenant) for p in got] == [("a2", "fair_share", "c")]
    # Not far enough below (ratio), a free worker, or the feature off: nothing.
    assert plan_fair({"c": 200.0}, shares, running, 0, 0, [], NOW, B, 2) == ()
    assert plan_fair({"c": 0.0}, shares, running, 1, 0, [], NOW, B, 2) == ()
    assert plan_fair({"c": 0.0}, shares, running, 0, 0, [], NOW, B, 0) == ()
    # A tenant's own leases are never taken for it.
    assert plan_fair({"a": 0.0}, {"a": 300.0}, running[:2], 0, 0, [], NOW, B, 2) == ()
    # Dispatch serves tiers first: for c's tier-0 work only a tier-0 lease is worth taking (b's, less over-served).
    got = plan_fair({"c": 0.0}, shares, running, 0, 0, [], NOW, B, 2, {"c": 0})
    assert [(p.job_id, p.for_tenant) for p in got] == [("b1", "c")]


fair_leases = st.lists(st.builds(Running, job_id=st.text("abcdef", min_size=1, max_size=3), epoch=st.integers(1, 5),
                                 priority=tiers, started_ms=st.integers(NOW - 3 * MINUTE_MS, NOW),
                                 asked=st.booleans(), preempted_last=st.booleans(),
                                 tenant=st.sampled_from(["a", "b", "c", "d"])),
                       max_size=12, unique_by=lambda r: r.job_id)
share_maps = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.floats(0, 1000), max_size=4)


@settings(max_examples=examples(300), deadline=None)
@given(share_maps, share_maps, fair_leases, st.integers(0, 3), recents, budgets, st.integers(0, 4))
def test_plan_fair_stays_in_budget_and_only_takes_from_a_tenant_far_above_the_waiting_one(
        waiting, held, running, free, recent, budget, ratio) -> None:
    got = plan_fair(waiting, held, running, free, 0, recent, NOW, budget, ratio)
    in_window = sum(1 for t in recent if NOW - MINUTE_MS < t <= NOW)
    assert len(got) <= max(0, budget.per_minute - in_window) and len({p.job_id for p in got}) == len(got)
    assert len({p.for_tenant for p in got}) == len(got) <= max(0, len(waiting) - free)
    by_id = {r.job_id: r for r in running}
    for p in got:
        r = by_id[p.job_id]
        victim, mine = held.get(r.tenant, 0.0), waiting[p.for_tenant]
        assert ratio >= 1 and r.tenant != p.for_tenant and victim > mine and victim >= ratio * mine
        assert may_yield(r, NOW, budget) and p.reason == "fair_share"
