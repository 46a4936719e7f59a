"""Cancel, pause, resume and reprioritize in every status where they mean something."""

from __future__ import annotations

import pytest

from spotreel.domain.events import CancelRequested, JobResumed
from spotreel.domain.state import Status
from tests.unit.jobkit import T0, Driver, kinds, leased_job, rejection

pytestmark = pytest.mark.unit


def _in(status: str) -> Driver:
    d = Driver()
    if status == Status.SCHEDULED:
        d.submit(run_at_ms=T0 + 60_000)
    elif status == Status.WAITING:
        d.submit(parents=("p",))
    else:
        d.submit()
    if status == Status.PAUSED:
        d.pause()
    if status in (Status.LEASED, Status.RUNNING):
        d.grant()
    if status == Status.RUNNING:
        d.progress(10.0)
    assert d.s.status == status
    return d


@pytest.mark.parametrize("status", [Status.QUEUED, Status.SCHEDULED, Status.WAITING, Status.PAUSED])
def test_cancel_of_a_job_that_is_not_running_is_immediate(status: str) -> None:
    d = _in(status)
    out = d.cancel("changed my mind")
    assert kinds(out) == ["JobCancelled"] and out[0].reason == "changed my mind"
    assert d.s.status == Status.CANCELLED and d.s.terminal_reason == "changed my mind"


@pytest.mark.parametrize("status", [Status.LEASED, Status.RUNNING])
def test_cancel_of_a_running_job_waits_for_the_worker(status: str) -> None:
    d = _in(status)
    out = d.cancel()
    assert isinstance(out[0], CancelRequested) and out[0].epoch == 1
    assert d.s.status == status and d.s.cancel_requested
    assert rejection(d.cancel()) == "cancel_requested"
    # The worker may still heartbeat and report while it winds down.
    assert kinds(d.renew()) == ["LeaseRenewed"]
    # But its late completion is refused: the user asked for a cancel.
    assert rejection(d.complete()) == "cancel_requested"
    assert d.s.status == status


@pytest.mark.parametrize("confirm", ["release", "fail", "expire"])
def test_cancel_is_confirmed_by_release_failure_or_expiry(confirm: str) -> None:
    d = _in(Status.RUNNING)
    d.cancel()
    out = {"release": lambda: d.release(reason="cancelled"), "fail": lambda: d.fail(), "expire": lambda: d.expire()}[confirm]()
    assert kinds(out)[-1] == "JobCancelled"
    assert d.s.status == Status.CANCELLED and d.s.lease is None and not d.s.cancel_requested
    # Confirming a cancel is neither a preemption nor a spent attempt.
    assert (d.s.preemptions, d.s.attempts_used) == (0, 0)
    assert rejection(d.complete(epoch=1, worker="w1")) == "terminal"


@pytest.mark.parametrize("status", [Status.QUEUED, Status.SCHEDULED, Status.WAITING])
def test_pause_and_resume_of_an_idle_job_return_it_where_it_was(status: str) -> None:
    d = _in(status)
    assert kinds(d.pause()) == ["JobPaused"]
    assert d.s.status == Status.PAUSED
    assert rejection(d.pause()) == "already_paused"
    out = d.resume()
    assert isinstance(out[0], JobResumed) and out[0].status == status
    assert d.s.status == status
    assert rejection(d.resume()) == "not_paused"


def test_a_paused_scheduled_job_that_became_due_resumes_to_the_queue() -> None:
    d = _in(Status.SCHEDULED)
    d.pause()
    assert rejection(d.activate(advance=60_000)) == "not_scheduled"
    assert d.resume()[0].status == Status.QUEUED


def test_a_paused_job_is_never_leased() -> None:
    d = _in(Status.PAUSED)
    assert rejection(d.grant()) == "not_queued"


def test_pause_of_a_running_job_takes_effect_when_the_worker_releases() -> None:
    d = _in(Status.RUNNING)
    d.checkpoint(4, 20.0)
    out = d.pause()
    assert kinds(out) == ["PauseRequested"] and d.s.pause_requested
    assert rejection(d.pause()) == "pause_requested"
    out = d.release(reason="paused")
    assert kinds(out) == ["LeaseReleased", "JobPaused"]
    assert d.s.status == Status.PAUSED and d.s.preemptions == 0
    d.resume()
    assert d.s.status == Status.QUEUED
    assert d.grant(worker="w2")[0].resume_step == 4


def test_pause_of_a_running_job_then_expiry_pauses_it() -> None:
    d = _in(Status.LEASED)
    d.pause()
    assert kinds(d.expire()) == ["LeaseExpired", "JobPaused"]


def test_a_completion_racing_a_pause_is_accepted() -> None:
    d = _in(Status.RUNNING)
    d.pause()
    assert kinds(d.complete()) == ["JobSucceeded"]


def test_a_failure_during_a_pause_request_still_counts_and_the_backoff_survives_the_pause() -> None:
    d = _in(Status.RUNNING)
    d.pause()
    out = d.fail()
    assert kinds(out) == ["AttemptFailed", "JobScheduled", "JobPaused"]
    assert d.s.status == Status.PAUSED and d.s.attempts_used == 1
    assert d.resume()[0].status == Status.SCHEDULED


def test_resume_withdraws_a_pending_pause() -> None:
    d = _in(Status.RUNNING)
    d.pause()
    out = d.resume()
    assert out[0].status == Status.RUNNING
    assert not d.s.pause_requested and d.s.lease is not None
    assert kinds(d.release()) == ["LeaseReleased", "JobRequeued"]


def test_cancel_overrides_a_pending_pause_and_pause_cannot_override_a_cancel() -> None:
    d = _in(Status.RUNNING)
    d.pause()
    d.cancel()
    assert d.s.cancel_requested and not d.s.pause_requested
    assert rejection(d.pause()) == "cancel_requested"
    assert kinds(d.release())[-1] == "JobCancelled"


def test_every_renewal_tells_the_holder_what_is_asked_of_it() -> None:
    # The gateway answers heartbeats and progress from these flags alone, so they must follow the state.
    def asks(d: Driver) -> list[tuple[bool, bool]]:
        return [(e.cancel_requested, e.drain_requested) for e in (*d.renew(), *d.progress(20.0, 2))]

    d = _in(Status.RUNNING)
    assert asks(d) == [(False, False)] * 2
    d.pause()
    assert asks(d) == [(False, True)] * 2
    d.resume()
    assert asks(d) == [(False, False)] * 2
    d.pause()
    d.cancel()
    assert asks(d) == [(True, False)] * 2


@pytest.mark.parametrize("status", [Status.QUEUED, Status.SCHEDULED, Status.WAITING, Status.PAUSED, Status.RUNNING])
def test_reprioritize(status: str) -> None:
    d = _in(status)
    out = d.send(_reprio(d, 5))
    assert kinds(out) == ["JobReprioritized"] and (out[0].priority, out[0].previous_priority) == (5, 0)
    assert d.s.priority == 5 and d.s.status == status
    assert rejection(d.send(_reprio(d, 5))) == "priority_unchanged"


def _reprio(d: Driver, priority: int):
    from spotreel.domain.commands import Reprioritize

    return Reprioritize(d.next_id("prio"), d.job_id, priority)


def test_requeue_is_only_for_failed_or_dead_lettered_jobs() -> None:
    d = leased_job()
    assert rejection(d.requeue()) == "not_requeueable"
