"""Leases and fencing: epochs, stale/unknown epochs, expiry by the owner's clock, renewals."""

from __future__ import annotations

import pytest

from spotreel.domain import commands as c
from spotreel.domain.decide import decide
from spotreel.domain.events import JobLeased
from spotreel.domain.state import Status
from tests.unit.jobkit import POOL, T0, TTL, Driver, kinds, leased_job, rejection

pytestmark = pytest.mark.unit


def test_grant_creates_a_lease_with_epoch_one() -> None:
    d = leased_job()
    leased = d.history[-1]
    assert isinstance(leased, JobLeased)
    assert (leased.epoch, leased.attempt, leased.worker_id, leased.pool) == (1, 1, "w1", POOL)
    assert leased.lease_expires_at_ms == T0 + TTL
    assert leased.resume_checkpoint_key is None
    assert d.s.status == Status.LEASED and d.s.phase == "starting"
    assert d.s.lease is not None and d.s.lease_valid_at(T0) and not d.s.lease_valid_at(T0 + TTL)


def test_grant_requires_a_queued_job_in_the_same_pool_and_a_positive_ttl() -> None:
    d = Driver()
    d.submit(run_at_ms=T0 + 1)
    assert rejection(d.grant()) == "not_queued"
    d.activate(advance=1)
    assert rejection(d.grant(pool="other@a100")) == "pool_mismatch"
    assert rejection(d.grant(ttl=0)) == "invalid_request"
    d.grant()
    assert rejection(d.grant(worker="w2")) == "not_queued"  # at most one lease
    assert d.s.lease is not None and d.s.lease.worker_id == "w1"


def test_epochs_strictly_increase_across_expiry_release_failure_and_manual_requeue() -> None:
    d = Driver()
    d.submit(max_attempts=1)
    seen = []
    d.grant()
    seen.append(d.s.epoch)
    d.expire()
    d.grant()
    seen.append(d.s.epoch)
    d.release()
    d.grant()
    seen.append(d.s.epoch)
    d.fail()  # max_attempts=1: dead-lettered
    assert d.s.status == Status.DEAD_LETTERED
    d.requeue()
    d.grant()
    seen.append(d.s.epoch)
    assert seen == [1, 2, 3, 4]
    assert [e.epoch for e in d.history if isinstance(e, JobLeased)] == [1, 2, 3, 4]


@pytest.mark.parametrize("verb", ["renew", "progress", "checkpoint", "complete", "fail", "release"])
def test_a_stale_epoch_is_rejected_and_changes_nothing(verb: str) -> None:
    d = leased_job()
    d.expire()
    d.grant(worker="w2")
    before = d.state
    call = {
        "renew": lambda: d.renew(epoch=1, worker="w1"),
        "progress": lambda: d.progress(50.0, epoch=1, worker="w1"),
        "checkpoint": lambda: d.checkpoint(5, 50.0, epoch=1, worker="w1"),
        "complete": lambda: d.complete(epoch=1, worker="w1"),
        "fail": lambda: d.fail(epoch=1, worker="w1"),
        "release": lambda: d.release(epoch=1, worker="w1"),
    }[verb]
    out = call()
    assert rejection(out) == "stale_epoch"
    assert (out[0].epoch_given, out[0].current_epoch) == (1, 2)
    assert d.state == before


def test_an_epoch_from_the_future_is_rejected() -> None:
    d = leased_job()
    before = d.state
    assert rejection(d.complete(epoch=7)) == "unknown_epoch"
    assert d.state == before


def test_a_worker_command_after_the_lease_ended_is_stale_even_with_the_same_epoch() -> None:
    d = leased_job()
    d.release()
    assert d.s.status == Status.QUEUED and d.s.epoch == 1
    assert rejection(d.renew(epoch=1, worker="w1")) == "stale_epoch"


def test_the_lease_holder_is_checked_too() -> None:
    d = leased_job()
    assert rejection(d.complete(worker="intruder")) == "worker_mismatch"


def test_expiry_is_decided_by_the_owner_clock_not_the_worker() -> None:
    d = leased_job()
    d.now = T0 + TTL  # the worker may believe otherwise; the owner's now_ms says the lease is over
    assert rejection(d.complete()) == "lease_expired"
    assert d.s.status == Status.LEASED  # the timer, not the late command, requeues
    out = d.expire(advance=0)
    assert kinds(out) == ["LeaseExpired", "JobRequeued"]
    assert out[1].reason == "lease_expired" and not out[1].budget_reset
    assert d.s.status == Status.QUEUED and d.s.lease is None


def test_renewal_extends_the_lease_from_now() -> None:
    d = leased_job()
    out = d.send(c.RenewLease("r", d.job_id, 1, "w1"), advance=20_000)
    assert kinds(out) == ["LeaseRenewed"] and out[0].lease_expires_at_ms == T0 + 20_000 + TTL
    assert d.s.lease is not None and d.s.lease.expires_at_ms == T0 + 20_000 + TTL
    # A timer armed for the original expiry fires and finds the lease still valid.
    assert rejection(d.send(c.ExpireLease("x", d.job_id, 1), at=T0 + TTL)) == "lease_not_expired"
    assert d.s.status == Status.LEASED
    assert kinds(d.send(c.ExpireLease("y", d.job_id, 1), at=T0 + 20_000 + TTL)) == ["LeaseExpired", "JobRequeued"]


def test_a_late_timer_for_an_older_lease_is_rejected() -> None:
    d = leased_job()
    d.expire()
    d.grant(worker="w2")
    before = d.state
    assert rejection(d.expire(epoch=1, advance=10 * TTL)) == "stale_epoch"
    assert d.state == before


def test_expire_without_a_lease_is_rejected() -> None:
    d = Driver()
    d.submit()
    assert rejection(d.expire(epoch=0)) == "stale_epoch"
    assert rejection(d.expire(epoch=1)) == "unknown_epoch"


def test_first_progress_makes_the_job_running_and_renews_the_lease() -> None:
    d = leased_job()
    out = d.send(c.ReportProgress("p", d.job_id, 1, "w1", 3, 15.0, "denoising"), advance=10_000)
    assert kinds(out) == ["ProgressReported"]
    assert out[0].lease_expires_at_ms == T0 + 10_000 + TTL
    assert d.s.status == Status.RUNNING and d.s.progress_pct == 15.0 and d.s.step == 3


@pytest.mark.parametrize("pct,step", [(-1.0, 0), (100.5, 0), (float("nan"), 0), (float("inf"), 0), (5.0, -1)])
def test_implausible_progress_is_rejected(pct: float, step: int) -> None:
    d = leased_job()
    assert rejection(d.progress(pct, step=step)) == "invalid_progress"


def test_completion_records_the_artifact_and_ends_the_lease() -> None:
    d = leased_job()
    d.progress(60.0)
    out = d.complete()
    assert kinds(out) == ["JobSucceeded"]
    s = d.s
    assert s.status == Status.SUCCEEDED and s.lease is None and s.progress_pct == 100.0 and s.phase == "done"
    assert s.artifact_key == f"videos/{d.job_id}/e00000001/video.mp4"
    assert rejection(d.complete()) == "terminal"  # never twice


def test_decide_is_a_function_of_its_inputs() -> None:
    d = leased_job()
    cmd = c.FailJob("f", d.job_id, 1, "w1", "oom", "x")
    assert decide(d.state, cmd, T0 + 5) == decide(d.state, cmd, T0 + 5)


def test_a_renewal_never_shortens_the_lease_even_if_the_owner_clock_stepped_back() -> None:
    d = leased_job()
    d.send(c.RenewLease("r1", d.job_id, 1, "w1"), advance=10_000)
    out = d.send(c.RenewLease("r2", d.job_id, 1, "w1"), at=T0 + 5_000)  # a new owner, slightly behind
    assert out[0].lease_expires_at_ms == T0 + 10_000 + TTL


# --- a lease that never reached its worker (the gateway hands it back as unclaimed) ----------------------

def test_an_unclaimed_lease_is_requeued_at_once_and_costs_no_attempt_or_preemption() -> None:
    from spotreel.domain.leases import UNCLAIMED

    d = Driver()
    d.submit(max_preemptions=1)
    d.grant()
    assert d.s.lease is not None and not d.s.lease.confirmed
    out = d.release(reason=UNCLAIMED)
    assert kinds(out) == ["LeaseReleased", "JobRequeued"]
    assert out[0].reason == UNCLAIMED and out[0].preemptions == 0
    assert out[1].reason == UNCLAIMED and not out[1].budget_reset
    assert d.s.status == Status.QUEUED and d.s.preemptions == 0 and d.s.attempts_used == 0
    assert d.s.phase == "pending"  # nothing ran, so nothing was interrupted
    # With max_preemptions=1 a real preemption would dead-letter; any number of unclaimed leases does not.
    for _ in range(5):
        d.grant()
        d.release(reason=UNCLAIMED)
    assert d.s.status == Status.QUEUED and d.s.preemptions == 0
    d.grant(worker="w2")
    assert d.s.epoch == 7  # epochs still only grow: each unclaimed lease used one


@pytest.mark.parametrize("act", ["renew", "progress", "checkpoint"])
def test_a_lease_its_holder_acted_on_cannot_be_released_as_unclaimed(act: str) -> None:
    from spotreel.domain.leases import UNCLAIMED

    d = leased_job()
    {"renew": d.renew, "progress": lambda: d.progress(10.0, step=2), "checkpoint": lambda: d.checkpoint(2, 10.0)}[act]()
    assert d.s.lease is not None and d.s.lease.confirmed
    before = d.state
    assert rejection(d.release(reason=UNCLAIMED)) == "lease_in_use"
    assert d.state == before
    # The worker's own release is still a release (a preemption).
    out = d.release()
    assert kinds(out) == ["LeaseReleased", "JobRequeued"] and out[0].preemptions == 1


def test_an_unclaimed_release_is_fenced_like_any_worker_command() -> None:
    from spotreel.domain.leases import UNCLAIMED

    d = leased_job()
    assert rejection(d.release(worker="w2", reason=UNCLAIMED)) == "worker_mismatch"
    assert rejection(d.release(epoch=2, reason=UNCLAIMED)) == "unknown_epoch"
    d.now = T0 + TTL
    assert rejection(d.release(reason=UNCLAIMED)) == "lease_expired"  # the expiry timer requeues it instead
    d.expire(advance=0)
    d.grant()
    assert rejection(d.release(epoch=1, worker="w1", reason=UNCLAIMED)) == "stale_epoch"


def test_an_unclaimed_lease_of_a_resumed_job_goes_back_to_interrupted_and_cancel_still_applies() -> None:
    from spotreel.domain.leases import UNCLAIMED

    d = leased_job()
    d.progress(40.0, step=8)
    d.checkpoint(8, 40.0)
    d.release()
    d.grant(worker="w2")
    assert d.s.phase in ("starting", "resuming")
    d.release(reason=UNCLAIMED)
    assert d.s.phase == "interrupted" and d.s.progress_pct == 40.0 and not d.s.resuming
    d.grant(worker="w3")
    d.cancel()
    out = d.release(reason=UNCLAIMED)
    assert kinds(out) == ["LeaseReleased", "JobCancelled"] and d.s.status == Status.CANCELLED
