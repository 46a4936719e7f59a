"""DAG parents (fail_fast / continue) and absorbing terminal states."""

from __future__ import annotations

import pytest

from spotreel.domain import commands as c
from spotreel.domain.decide import decide
from spotreel.domain.state import Status
from tests.unit.jobkit import T0, Driver, kinds, leased_job, rejection

pytestmark = pytest.mark.unit


def test_all_parents_succeeded_queues_the_child() -> None:
    d = Driver()
    d.submit(parents=("p1", "p2"))
    assert kinds(d.resolve("p1", "succeeded")) == ["ParentResolved"]
    assert d.s.status == Status.WAITING and d.s.pending_parents == ("p2",)
    out = d.resolve("p2", "succeeded")
    assert kinds(out) == ["ParentResolved", "JobQueued"] and out[1].reason == "parents_resolved"
    assert d.s.status == Status.QUEUED
    assert d.s.parent_outcomes == (("p1", "succeeded"), ("p2", "succeeded"))


def test_a_child_with_a_future_run_at_is_scheduled_once_its_parents_are_done() -> None:
    d = Driver()
    d.submit(parents=("p1",), run_at_ms=T0 + 60_000)
    out = d.resolve("p1", "succeeded")
    assert kinds(out) == ["ParentResolved", "JobScheduled"]
    assert d.s.status == Status.SCHEDULED


@pytest.mark.parametrize("outcome", ["failed", "cancelled", "dead_lettered"])
def test_fail_fast_cancels_the_child_on_the_first_unsuccessful_parent(outcome: str) -> None:
    d = Driver()
    d.submit(parents=("p1", "p2"))
    out = d.resolve("p1", outcome)
    assert kinds(out) == ["ParentResolved", "JobCancelled"] and out[1].reason == "parent_failed"
    assert d.s.status == Status.CANCELLED
    assert rejection(d.resolve("p2", "succeeded")) == "terminal"


def test_continue_runs_the_child_once_every_parent_is_terminal() -> None:
    d = Driver()
    d.submit(parents=("p1", "p2"), dag_policy="continue")
    assert kinds(d.resolve("p1", "failed")) == ["ParentResolved"]
    assert d.s.status == Status.WAITING
    assert kinds(d.resolve("p2", "succeeded")) == ["ParentResolved", "JobQueued"]
    assert dict(d.s.parent_outcomes) == {"p1": "failed", "p2": "succeeded"}


def test_parent_resolution_is_checked() -> None:
    d = Driver()
    d.submit(parents=("p1", "p2"))
    assert rejection(d.resolve("stranger", "succeeded")) == "not_a_parent"
    assert rejection(d.resolve("p1", "running")) == "invalid_request"
    d.resolve("p1", "succeeded")
    assert rejection(d.resolve("p1", "succeeded")) == "parent_already_resolved"


def test_parents_resolving_while_paused_are_recorded_and_resume_uses_them() -> None:
    d = Driver()
    d.submit(parents=("p1",))
    d.pause()
    assert kinds(d.resolve("p1", "succeeded")) == ["ParentResolved"]
    assert d.s.status == Status.PAUSED
    assert d.resume()[0].status == Status.QUEUED


def test_a_paused_child_is_still_cancelled_by_a_failed_parent_under_fail_fast() -> None:
    d = Driver()
    d.submit(parents=("p1",))
    d.pause()
    assert kinds(d.resolve("p1", "failed"))[-1] == "JobCancelled"


def _terminal(status: str) -> Driver:
    d = leased_job(max_attempts=1)
    if status == Status.SUCCEEDED:
        d.complete()
    elif status == Status.FAILED:
        d.fail(retryable=False)
    elif status == Status.CANCELLED:
        d.cancel()
        d.release()
    else:
        d.fail()
    assert d.s.status == status
    return d


def _every_command(job_id: str, epoch: int) -> list[object]:
    return [
        c.CancelJob("x1", job_id),
        c.PauseJob("x2", job_id),
        c.ResumeJob("x3", job_id),
        c.Reprioritize("x4", job_id, 9),
        c.GrantLease("x5", job_id, "w9", "tiny-t2v@h100", 1000),
        c.ExpireLease("x6", job_id, epoch),
        c.ActivateJob("x7", job_id),
        c.ResolveParent("x8", job_id, "p", "succeeded"),
        c.RenewLease("x9", job_id, epoch, "w1"),
        c.ReportProgress("x10", job_id, epoch, "w1", 1, 1.0),
        c.RecordCheckpoint("x11", job_id, epoch, "w1", "k", 99, 99.0, "s", 1),
        c.CompleteJob("x12", job_id, epoch, "w1", "a", "s", 1),
        c.FailJob("x13", job_id, epoch, "w1", "e", "m"),
        c.ReleaseLease("x14", job_id, epoch, "w1"),
    ]


@pytest.mark.parametrize("status", sorted(Status.TERMINAL))
def test_terminal_states_absorb_every_command_but_requeue(status: str) -> None:
    d = _terminal(status)
    for command in _every_command(d.job_id, d.s.epoch):
        out = decide(d.state, command, d.now + 10**9)
        assert rejection(out) == "terminal", command
    out = decide(d.state, c.RequeueJob("rq", d.job_id), d.now)
    if status in Status.REQUEUEABLE:
        assert kinds(out) == ["JobRequeued"]
    else:
        assert rejection(out) == "terminal"


def test_evolve_ignores_what_is_not_a_job_event() -> None:
    from spotreel.domain.events import ScheduleDeleted
    from spotreel.domain.evolve import evolve

    d = leased_job()
    assert evolve(d.state, ScheduleDeleted("s", 9, T0, "x")) is d.state
    assert evolve(None, ScheduleDeleted("s", 9, T0, "x")) is None


def test_a_hand_made_state_with_an_unknown_policy_still_gets_an_answer() -> None:
    from dataclasses import replace

    d = Driver()
    d.submit(parents=("p1",))
    odd = replace(d.s, dag_policy="mystery")
    out = decide(odd, c.ResolveParent("r", d.job_id, "p1", "failed"), T0)
    assert kinds(out) == ["ParentResolved", "JobCancelled"]


def test_watch_parent_records_the_child_once_and_reports_the_parent_status() -> None:
    d = leased_job()
    out = d.send(c.WatchParent("wp1", d.job_id, "child1"))
    assert kinds(out) == ["ParentWatched"] and out[0].child_id == "child1" and out[0].status == Status.LEASED
    d.send(c.WatchParent("wp2", d.job_id, "child2"))
    d.send(c.WatchParent("wp1", d.job_id, "child1"))  # a re-sent watch changes no watcher list
    assert d.s.watchers == ("child1", "child2")
    d.complete()
    assert d.s.status == Status.SUCCEEDED and d.s.watchers == ("child1", "child2")


@pytest.mark.parametrize("status", sorted(Status.TERMINAL))
def test_a_terminal_parent_still_accepts_a_watch_and_names_its_outcome(status: str) -> None:
    d = _terminal(status)
    out = decide(d.state, c.WatchParent("wp", d.job_id, "late-child"), d.now)
    assert kinds(out) == ["ParentWatched"] and out[0].status == status and out[0].version == d.s.version + 1


def test_watching_an_unknown_parent_is_rejected_naming_the_child() -> None:
    out = decide(None, c.WatchParent("wp", "jnobody", "child9"), T0)
    assert rejection(out) == "unknown_job" and out[0].detail == "child9"
