"""The pure projection: each event type's rows, and order-safety under the newest-timestamp-wins rule."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spotreel.domain import events as ev
from spotreel.domain.evolve import fold
from spotreel.services.projector import job_rows as jr
from spotreel.services.projector import projection as pj
from spotreel.services.projector import rows as pr
from tests.unit.jobkit import T0, Driver
from tests.unit.projection_histories import histories
from tests.unit.projection_model import Tables, project_all, scrambled

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _no_nones(row: dict) -> dict:
    return {k: v for k, v in row.items() if v is not None}


def _expected(history: list) -> tuple:
    state = fold(history)
    return state, _no_nones(jr.job_row(state)), _no_nones(jr.tenant_row(state))


def _scripted() -> list[list]:
    from spotreel.domain import commands as c_

    """Between them, these histories hold every job event type."""
    a = Driver()
    a.submit(key="a", parents=("parent-1",))
    a.resolve("parent-1", "succeeded")
    a.grant()
    a.progress(30.0, 6)
    a.checkpoint(6, 30.0)
    a.renew()
    a.pause()
    a.release()
    a.resume()
    a.send(ev_reprioritize(a))
    a.grant(worker="w2")
    a.cancel()
    a.fail()
    b = Driver()
    b.submit(key="b", run_at_ms=T0 + 1000)
    b.activate(advance=1000)
    b.grant()
    b.expire()
    b.grant()
    b.send(c_.WatchParent("watch", b.job_id, "child-b"))
    b.complete()
    b.complete()  # rejected: terminal
    c = Driver()
    c.submit(key="c")
    c.grant()
    c.send(c_.PreemptLease("preempt", c.job_id, 1, 9))
    c.release(reason="paused")
    c.grant()
    c.fail(retryable=False)
    c.requeue()
    d = Driver()
    d.submit(key="d", max_attempts=1)
    d.grant()
    d.fail()
    d.send(c_.EraseJob("erase", d.job_id, by="tenant:t"))
    return [a.history, b.history, c.history, d.history]


def ev_reprioritize(d: Driver):
    from spotreel.domain import commands as c

    return c.Reprioritize(d.next_id("prio"), d.job_id, 9)


def test_the_scripted_histories_cover_every_job_event_type():
    seen = {type(e) for h in _scripted() for e in h}
    assert seen == set(ev.JOB_EVENTS), set(ev.JOB_EVENTS) - seen


def test_every_accepted_event_is_a_history_row_and_a_rejection_a_rejection_row():
    for h in _scripted():
        for e in h:
            _, ops = pj.project(None if isinstance(e, ev.JobSubmitted) else fold([x for x in h if x.version < e.version and not isinstance(x, ev.CommandRejected)]), e)
            tables = {op.table for op in ops}
            if isinstance(e, ev.CommandRejected):
                assert tables == {pr.REJECTIONS}
                (op,) = ops
                assert dict(op.key) == {"job_id": e.job_id, "version": e.version, "command_id": e.command_id}
            else:
                history_rows = [op for op in ops if op.table == pr.EVENTS]
                assert len(history_rows) == 1 and dict(history_rows[0].key)["version"] == e.version
                assert dict(history_rows[0].values)["event_type"] == type(e).__name__
                assert all(op.timestamp == e.version for op in ops if op.table in pr.JOB_SCOPED)
                assert pr.JOBS in tables  # every accepted event moves version/updated_at at least


def test_a_running_jobs_reports_leave_its_live_rows_alone_and_a_status_change_rewrites_them():
    d = Driver()
    d.submit()
    d.grant(worker="w1")
    d.progress(10.0, 2)  # leased -> running: a status change
    state = fold(d.history)
    live = {pr.POOL_JOBS, pr.TENANT_LIVE}
    start = len(d.history)
    for _ in range(3):  # still running: a report, a checkpoint and a heartbeat change no live row
        d.progress(20.0, 4)
        d.checkpoint(4, 20.0)
        d.renew()
    assert len(d.history) - start == 9
    for event in d.history[start:]:
        state, ops = pj.project(state, event)
        assert not live & {op.table for op in ops}, event
    d.release()  # running -> queued: both rows again, at the release's version
    state, ops = pj.project(state, d.history[-1])
    written = {op.table: op for op in ops if op.table in live}
    assert written.keys() == live
    assert all(dict(op.values) == {"status": "queued"} and op.timestamp == state.version for op in written.values())


def test_lease_lifecycle_rows():
    d = Driver()
    d.submit()
    d.grant(worker="w1")
    d.progress(40.0, 8)
    d.expire()
    d.grant(worker="w2")
    d.complete()
    t = Tables()
    for ops in project_all(d.history)[1]:
        t.apply_all(ops)
    attempts = t.table(pr.ATTEMPTS)
    first = attempts[(("job_id", d.job_id), ("lease_epoch", 1))]
    second = attempts[(("job_id", d.job_id), ("lease_epoch", 2))]
    assert (first["status"], first["worker_id"], first["last_step"], first["reason"]) == ("lost", "w1", 8, "lease_expired")
    assert (second["status"], second["worker_id"]) == ("succeeded", "w2")
    workers = t.table(pr.WORKERS)
    assert workers[(("worker_id", "w1"),)]["status"] == "gone"
    assert workers[(("worker_id", "w2"),)]["status"] == "idle"
    assert "current_job_id" not in workers[(("worker_id", "w2"),)]
    job = t.table(pr.JOBS)[(("job_id", d.job_id),)]
    assert job["status"] == "succeeded" and job["result_key"] and job["lease_epoch"] == 2
    assert t.table(pr.POOL_JOBS) == {}  # terminal: gone from its pool's live set
    assert t.table(pr.TENANT_LIVE) == {}  # and from its tenant's (the gateway's in-flight guard counts those)


def _worker_row(histories: list[list], order: list[int]) -> dict:
    """The `w` row after applying the worker ops of these jobs' events in the given interleaving."""
    steps = []
    for h in histories:
        state = None
        for e in h:
            state, ops = pj.project(state, e)
            steps.append([op for op in ops if op.table == pr.WORKERS])
    t = Tables()
    for i in order:
        t.apply_all(steps[i])
    return t.table(pr.WORKERS)[(("worker_id", "w"),)]


@given(st.randoms(use_true_random=False), st.sampled_from(["complete", "fail", "release", "expire"]))
@FAST
def test_a_late_end_of_a_workers_previous_lease_never_marks_it_idle_on_its_next(rnd, how):
    # w finishes job x and is leased job y; x's end is judged late (its partition lagged, the worker moved on
    # with a pending verdict), so y's JobLeased is stamped before x's end. Whatever order the projector
    # applies them in, the row says w is busy on y.
    x, y = Driver(), Driver()
    x.submit(key="x")
    y.submit(key="y")
    x.grant(worker="w")
    x.progress(50.0, 5)
    y.now = T0 + 20_000
    y.grant(worker="w")
    if how == "expire":
        x.expire(advance=40_000)
    else:
        getattr(x, how)()  # stamped at x's clock, then moved after y's grant:
        x.history[-1] = replace_at(x.history[-1], T0 + 30_000)
    n = len(x.history) + len(y.history)
    order = list(range(n))
    rnd.shuffle(order)
    row = _worker_row([x.history, y.history], order)
    assert (row["status"], row["current_job_id"], row["current_epoch"]) == ("busy", y.job_id, 1), row
    assert row["last_seen_at"] == max(e.at_ms for e in x.history + y.history
                                      if isinstance(e, (ev.JobLeased, ev.ProgressReported, ev.JobSucceeded,
                                                        ev.AttemptFailed, ev.LeaseReleased)))


def test_the_end_of_the_current_lease_marks_the_worker_idle_in_any_order():
    x = Driver()
    x.submit()
    x.grant(worker="w")
    x.progress(50.0, 5)
    x.complete()
    n = len(x.history)
    for order in (list(range(n)), list(reversed(range(n))), [n - 1, *range(n - 1)]):
        row = _worker_row([x.history], order)
        assert row["status"] == "idle" and "current_job_id" not in row, row


def test_status_rows_written_by_the_event_time_ordering_give_way_to_the_lease_ordering():
    # A rolling upgrade: the lease's "busy" was written by the old projector (at_ms * 1000 + version), its
    # end by the new one; then the worker's next lease's "busy" by the new one over the old end.
    x = Driver()
    x.submit()
    x.grant(worker="w")
    leased = x.history[-1]
    old_busy = pr.RowOp(pr.WORKERS, (("worker_id", "w"),), (("status", "busy"), ("current_job_id", x.job_id)),
                        pj.worker_timestamp(leased))
    x.progress(50.0, 5)
    x.complete()
    end_ops = [op for op in pj.project(fold(x.history[:-1]), x.history[-1])[1] if op.table == pr.WORKERS]
    row = Tables().apply_all([old_busy, *end_ops]).table(pr.WORKERS)[(("worker_id", "w"),)]
    assert row["status"] == "idle" and "current_job_id" not in row, row
    old_end = pr.RowOp(pr.WORKERS, (("worker_id", "w"),), (("status", "idle"),),
                       pj.worker_timestamp(x.history[-1]))
    y = Driver()
    y.submit(key="y")
    y.now = x.now + 1
    y.grant(worker="w")
    busy_ops = [op for op in pj.project(fold(y.history[:-1]), y.history[-1])[1] if op.table == pr.WORKERS]
    row = Tables().apply_all([old_end, *busy_ops]).table(pr.WORKERS)[(("worker_id", "w"),)]
    assert row["status"] == "busy" and row["current_job_id"] == y.job_id, row


def replace_at(event, at_ms: int):
    import dataclasses

    return dataclasses.replace(event, at_ms=at_ms)


def test_a_rejection_changes_no_state_row():
    d = Driver()
    d.submit()
    d.progress(10.0, 1, epoch=3, worker="w9")  # no lease: rejected
    rejected = d.history[-1]
    assert isinstance(rejected, ev.CommandRejected)
    state = fold(d.history)
    after, ops = pj.project(state, rejected)
    assert after is state and [op.table for op in ops] == [pr.REJECTIONS]


def test_a_replayed_event_only_rewrites_its_history_row():
    d = Driver()
    d.submit()
    d.grant()
    state = fold(d.history)
    after, ops = pj.project(state, d.history[-1])
    assert after is state and [op.table for op in ops] == [pr.EVENTS]


def test_schedule_events_touch_only_the_schedule_tables():
    e = ev.ScheduleDeleted("s1", 1, T0, "cmd")
    state, ops = pj.project(None, e)
    assert state is None and [op.table for op in ops] == ["schedules_by_id"]


@FAST
@given(histories())
def test_in_order_projection_is_the_fold(history):
    state, expected_job, expected_tenant = _expected(history)
    _, per_event = project_all(history)
    t = Tables()
    for ops in per_event:
        t.apply_all(ops)
    assert t.table(pr.JOBS) == {(("job_id", state.job_id),): expected_job}
    tkey = (("tenant_id", state.tenant), ("created_at", state.submitted_at_ms), ("job_id", state.job_id))
    assert t.table(pr.TENANT_JOBS) == {tkey: expected_tenant}
    live = t.table(pr.POOL_JOBS)
    tenant_live = t.table(pr.TENANT_LIVE)
    if state.is_terminal:
        assert live == {} and tenant_live == {}
    else:
        row = {"status": state.status}  # status only (job_rows.pool_row): its write time is the version
        assert live == {(("pool", state.pool), ("job_id", state.job_id)): row}
        assert tenant_live == {(("tenant_id", state.tenant), ("job_id", state.job_id)): row}
    accepted = [e for e in history if not isinstance(e, ev.CommandRejected)]
    assert sorted(k[1][1] for k in t.table(pr.EVENTS)) == [e.version for e in accepted]
    rejected = {(e.version, e.command_id) for e in history if isinstance(e, ev.CommandRejected)}
    assert {(k[1][1], k[2][1]) for k in t.table(pr.REJECTIONS)} == rejected
    epochs = {e.epoch for e in history if isinstance(e, ev.JobLeased)}
    assert {k[1][1] for k in t.table(pr.ATTEMPTS)} == epochs


@FAST
@given(histories(), st.integers(0, 2**32))
def test_shuffled_duplicated_writes_give_the_in_order_rows(history, seed):
    _, per_event = project_all(history)
    in_order = Tables().apply_all(op for ops in per_event for op in ops).snapshot()
    rnd = random.Random(seed)
    assert Tables().apply_all(scrambled(per_event, rnd)).snapshot() == in_order


@FAST
@given(histories())
def test_replaying_the_whole_history_changes_nothing(history):
    final, per_event = project_all(history)
    t = Tables().apply_all(op for ops in per_event for op in ops)
    before = t.snapshot()
    # A projector that kept its state, and one that starts from nothing (a rebuild without truncate).
    t.apply_all(op for ops in project_all(history, state=final)[1] for op in ops)
    t.apply_all(op for ops in project_all(history)[1] for op in ops)
    assert t.snapshot() == before


@FAST
@given(histories(), histories(key="k2"), st.lists(st.integers(1, 12), min_size=1, max_size=8), st.integers(0, 99))
def test_coalesced_batches_write_the_same_rows(h1, h2, cuts, seed):
    # Two jobs interleaved, as on one partition; each batch is a contiguous slice.
    rnd = random.Random(seed)
    merged, a, b = [], list(h1), list(h2)
    while a or b:
        src = a if (a and (not b or rnd.random() < 0.5)) else b
        merged.append(src.pop(0))
    _, per_event = project_all(merged)
    plain = Tables().apply_all(op for ops in per_event for op in ops).snapshot()
    t, i = Tables(), 0
    sizes = iter(cuts * 100)
    while i < len(per_event):
        n = next(sizes)
        batch = [op for ops in per_event[i:i + n] for op in ops]
        t.apply_all(pj.coalesce(batch))
        i += n
    assert t.snapshot() == plain
    assert len(pj.coalesce([op for ops in per_event for op in ops])) <= sum(len(o) for o in per_event)


def test_summary_is_one_short_line():
    h = _scripted()[0]
    for e in h:
        s = pj.summary(e)
        assert s.startswith(type(e).__name__) and "\n" not in s and len(s) <= 240
