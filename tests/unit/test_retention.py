"""Bounded state (domain/retention.py, services/scheduler/eviction.py): which jobs leave the scheduler's table
and when, what their summary answers, and that for the commands a summary still answers (a re-sent
submission, a late child's watch) eviction changes nothing a caller can see."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.domain.decide import decide
from spotreel.domain.retention import Retention, evict_at, forget_at, summarize
from spotreel.domain.state import Status
from spotreel.services.scheduler import followups, statecodec
from spotreel.services.scheduler.eviction import Evictions, evictable, forgettable
from tests.unit.jobkit import T0, Driver, kinds, leased_job, rejection, submit

POLICY = Retention(retention_ms=1_000, summary_retention_ms=10_000)


def _succeeded() -> Driver:
    d = leased_job()
    d.complete()
    assert d.s.status == Status.SUCCEEDED
    return d


def _ended(how: str) -> Driver:
    if how == "succeeded":
        return _succeeded()
    d = leased_job()
    if how == "failed":
        d.fail(retryable=False)
    elif how == "cancelled":
        d.send(c.CancelJob("cancel", d.job_id, "user"))
        d.release(reason="cancelled")
    else:
        d = Driver()
        d.submit(max_attempts=1)
        d.grant()
        d.expire()
        d.grant()
        d.expire()
        d.cancel()
    assert d.s.is_terminal, d.s.status
    return d


def test_only_a_terminal_job_is_due_and_only_after_its_retention():
    d = leased_job()
    assert evict_at(d.s, POLICY) is None
    d.complete()
    assert evict_at(d.s, POLICY) == d.s.updated_at_ms + 1_000
    assert not evictable(d.s, POLICY, d.s.updated_at_ms + 999)
    assert evictable(d.s, POLICY, d.s.updated_at_ms + 1_000)
    stub = summarize(d.s)
    assert evict_at(stub, POLICY) is None  # already evicted
    assert forget_at(stub, POLICY) == d.s.updated_at_ms + 10_000
    assert forget_at(d.s, POLICY) is None
    assert forgettable(stub, POLICY, d.s.updated_at_ms + 10_000)
    assert not evictable(None, POLICY, 10**15) and not forgettable(None, POLICY, 10**15)


def test_a_live_job_is_never_summarized_and_the_windows_are_ordered():
    with pytest.raises(ValueError):
        summarize(leased_job().s)
    with pytest.raises(ValueError):
        Retention(retention_ms=10, summary_retention_ms=5)


def test_the_summary_keeps_outcome_version_and_request_hash_and_round_trips():
    s = _succeeded().s
    stub = summarize(s)
    assert (stub.status, stub.version, stub.request_hash, stub.tenant, stub.updated_at_ms) == (
        s.status, s.version, s.request_hash, s.tenant, s.updated_at_ms)
    assert stub.evicted and stub.spec.prompt == "" and stub.watchers == ()
    raw = statecodec.dumps_summary(stub)
    assert statecodec.loads_summary(s.job_id, raw) == stub
    assert len(raw) < len(statecodec.dumps(s)) / 5
    with pytest.raises(ValueError):
        statecodec.dumps(stub)  # a summary never goes under the job's own key


def test_a_resubmission_is_still_a_no_op_and_another_request_under_the_key_still_refused():
    stub = summarize(_succeeded().s)
    assert decide(stub, replace(submit(), command_id="again"), T0 + 5) == ()
    assert rejection(decide(stub, replace(submit(), request_hash="h2"), T0 + 5)) == "idempotency_key_reused"


def test_a_late_child_learns_the_evicted_parents_outcome_instead_of_being_cancelled():
    parent = _succeeded().s
    stub = summarize(parent)
    out = decide(stub, c.WatchParent("watch:child:p", parent.job_id, "child"), T0 + 5)
    assert kinds(out) == ["ParentWatched"]
    assert out[0].status == Status.SUCCEEDED and out[0].version == parent.version + 1
    assert followups.for_job_event(out[0], None) == [followups.resolve(parent.job_id, "child", "succeeded")]
    # Unknown (never submitted, or its summary forgotten): the child is cancelled, as before.
    unknown = decide(None, c.WatchParent("watch:child:x", "jx", "child"), T0 + 5)
    assert followups.for_job_event(unknown[0], None) == [followups.resolve("jx", "child", "cancelled")]


@pytest.mark.parametrize("command", [
    c.CancelJob("x", "J", "user"), c.RequeueJob("x", "J"), c.PauseJob("x", "J"), c.ActivateJob("x", "J"),
    c.GrantLease("x", "J", "w", "p", 1000), c.ExpireLease("x", "J", 1),
    c.CompleteJob("x", "J", 1, "w1", "k", "sha", 1)])
def test_every_other_command_is_refused_evicted_even_a_requeue_of_a_failed_job(command):
    stub = summarize(_ended("failed").s)
    out = decide(stub, replace(command, job_id=stub.job_id), T0 + 5)
    assert rejection(out) == "evicted" and out[0].version == stub.version


@settings(max_examples=60, deadline=None)
@given(how=st.sampled_from(["succeeded", "failed", "cancelled", "dead_lettered"]),
       same=st.booleans(), child=st.text("abc", min_size=1, max_size=4))
def test_eviction_is_invisible_to_a_resubmission_and_to_a_watch(how, same, child):
    """The property: for the commands a summary answers, decide gives the same events (and follow-ups) for
    the evicted job as for the whole one."""
    whole = _ended(how).s
    stub = summarize(whole)
    for command in (replace(submit(), command_id="re", request_hash="h1" if same else "other"),
                    c.WatchParent("watch", whole.job_id, child)):
        a, b = decide(whole, command, T0 + 99), decide(stub, command, T0 + 99)
        assert a == b
        assert [followups.for_job_event(e, None) for e in a] == [followups.for_job_event(e, None) for e in b]


def test_the_heaps_pop_only_what_is_due_and_a_changed_job_is_checked_again():
    q = Evictions(POLICY)
    d = _succeeded()
    q.observe(leased_job().s)  # live: not pushed
    q.observe(d.s)
    assert len(q) == 1
    due = d.s.updated_at_ms + 1_000
    assert q.due_jobs(due - 1, 10) == []
    assert q.due_jobs(due, 10) == [d.job_id]
    # A summary goes to the other heap, due at its own (longer) retention.
    q.observe(summarize(d.s))
    assert q.due_summaries(d.s.updated_at_ms + 9_999, 10) == []
    assert q.due_summaries(d.s.updated_at_ms + 10_000, 10) == [d.job_id]
    # At most `limit` per call, oldest first.
    many = Evictions(POLICY)
    for i in range(5):
        many.observe(replace(d.s, job_id=f"j{i}", updated_at_ms=T0 + i))
    assert many.due_jobs(T0 + 10_000, 3) == ["j0", "j1", "j2"] and len(many) == 2


def test_a_summary_that_a_late_watch_changed_stays_a_summary():
    stub = summarize(_succeeded().s)
    out = decide(stub, c.WatchParent("watch", stub.job_id, "child"), T0 + 50_000)
    from spotreel.domain.evolve import fold
    after = fold(out, stub)
    assert after.evicted and after.version == stub.version + 1
    assert isinstance(out[0], ev.ParentWatched)
    assert statecodec.loads_summary(stub.job_id, statecodec.dumps_summary(after)).version == after.version


def test_a_process_forgets_the_keys_of_partitions_it_no_longer_owns():
    """Faust's memory store drops only what it restored; a key this process wrote for a partition it lost
    would outlive that key's tombstone once compaction removes it, and resurrect an evicted job if the
    partition came back. Every kind of key maps to its changelog partition and unowned ones are dropped."""
    from types import SimpleNamespace

    from spotreel.adapters.partitioning import partition_for
    from spotreel.services.scheduler.table import Store, key_partition

    n = 6
    jobs = [f"j{i}" for i in range(40)]
    data = {j.encode(): b"{}" for j in jobs}
    data.update({statecodec.summary_key(j): b"[]" for j in jobs})
    data.update({b"~s:sched-%d" % i: b"{}" for i in range(10)})
    data.update({b"~meta:%d" % p: b"{}" for p in range(n)})
    for key in data:
        assert key_partition(key, n) in range(n)
    assert key_partition(statecodec.summary_key("jx"), n) == partition_for("jx", n) == key_partition(b"jx", n)
    assert key_partition(b"~meta:4", n) == 4
    owner = Store(SimpleNamespace(data=dict(data)), n)
    owner.forget_unowned({1, 4})
    assert owner.table.data and {key_partition(k, n) for k in owner.table.data} == {1, 4}
    assert len(owner.table.data) == sum(key_partition(k, n) in {1, 4} for k in data)
