"""The job's time limits (domain/limits.py): the rendering timeout across attempts, the stuck rule, and the
retry policy's limits; unit tests and hypothesis properties."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.domain import commands as c
from spotreel.domain import limits
from spotreel.domain.decide import submission_problem
from spotreel.domain.evolve import fold
from spotreel.domain.state import Status
from spotreel.domain.timers import TimerKind, timers_for
from tests.unit.jobkit import T0, TTL, Driver, kinds, leased_job, rejection, submit
from tests.harness.hypothesis_profiles import examples

pytestmark = pytest.mark.unit


def long_lease(**overrides: Any) -> Driver:
    """A leased job whose lease TTL outlasts the test: only the limits under test end it."""
    d = Driver()
    d.submit(**overrides)
    d.grant(ttl=10**9)
    return d


def timer(d: Driver, kind: str) -> Any:
    found = [t for t in timers_for(d.state) if t.kind == kind]
    return found[0] if found else None


def fire(d: Driver, kind: str, at: int | None = None) -> tuple[Any, ...]:
    t = timer(d, kind)
    assert t is not None, f"no {kind} timer"
    return d.send(t.command(), at=t.at_ms if at is None else at)


# --- timeout ------------------------------------------------------------------------------------------------


def test_no_timeout_by_default_and_the_timer_is_the_lease_start_plus_the_timeout() -> None:
    assert timer(leased_job(), TimerKind.TIMEOUT) is None
    d = leased_job(timeout_ms=90_000)
    t = timer(d, TimerKind.TIMEOUT)
    assert (t.at_ms, t.epoch) == (T0 + 90_000, 1)
    command = t.command()
    assert isinstance(command, c.ExpireLease) and command.rule == "timeout"
    assert command.command_id == f"timer:timeout:{d.job_id}:e1@{T0 + 90_000}"


def test_timeout_fails_the_job_for_good_with_reason_timeout() -> None:
    d = leased_job(timeout_ms=90_000)
    for i in range(1, 4):
        d.send(c.RenewLease(f"r{i}", d.job_id, 1, "w1"), at=T0 + i * 25_000)
    out = fire(d, TimerKind.TIMEOUT)
    assert kinds(out) == ["AttemptFailed", "JobFailed"]
    failed, final = out
    assert (failed.error_code, failed.retryable, failed.attempts_used, failed.worker_id) == ("timeout", False, 1, "w1")
    assert (final.reason, final.error_code) == ("timeout", "timeout")
    assert (d.s.status, d.s.terminal_reason, d.s.lease, d.s.render_ms) == (Status.FAILED, "timeout", None, 90_000)
    # The worker is fenced out (the job is terminal), and the job stays failed.
    assert rejection(d.renew(epoch=1, worker="w1")) == "terminal"
    assert timers_for(d.state) == ()


def test_an_early_or_stale_timeout_timer_is_refused() -> None:
    d = long_lease(timeout_ms=90_000)
    t = timer(d, TimerKind.TIMEOUT)
    assert rejection(d.send(t.command(), at=T0 + 89_999)) == "not_due"
    d.complete()
    assert rejection(d.send(t.command(), at=T0 + 90_000)) == "terminal"


def test_rendering_time_adds_up_across_attempts_and_nothing_else_counts() -> None:
    d = long_lease(timeout_ms=100_000)
    d.release(reason="preempted")  # at T0: 0 ms
    d.send(c.GrantLease("g2", d.job_id, "w2", d.s.pool, 10**9), at=T0 + 500_000)  # 500 s queued: not rendering
    d.progress(10.0, step=2)
    d.send(c.ReleaseLease("rel2", d.job_id, 2, "w2"), at=T0 + 530_000)  # 30 s rendered
    assert d.s.render_ms == 30_000
    d.send(c.GrantLease("g3", d.job_id, "w3", d.s.pool, 10**9), at=T0 + 600_000)
    assert timer(d, TimerKind.TIMEOUT).at_ms == T0 + 600_000 + 70_000
    d.send(c.FailJob("f3", d.job_id, 3, "w3", "oom", "x"), at=T0 + 640_000)  # 40 s more, then a backoff
    assert d.s.render_ms == 70_000 and d.s.status == Status.SCHEDULED
    d.send(c.ActivateJob("a", d.job_id), at=d.s.run_at_ms)
    d.send(c.GrantLease("g4", d.job_id, "w4", d.s.pool, 10**9), at=T0 + 700_000)
    assert timer(d, TimerKind.TIMEOUT).at_ms == T0 + 700_000 + 30_000
    assert kinds(fire(d, TimerKind.TIMEOUT)) == ["AttemptFailed", "JobFailed"]
    assert d.s.render_ms == 100_000


def test_an_unclaimed_lease_counts_no_time_and_a_manual_requeue_starts_over() -> None:
    d = leased_job(timeout_ms=60_000)
    d.send(c.ReleaseLease("u", d.job_id, 1, "w1", "unclaimed"), at=T0 + 20_000)
    assert d.s.render_ms == 0
    d.send(c.GrantLease("g2", d.job_id, "w2", d.s.pool, TTL), at=T0 + 30_000)
    fire(d, TimerKind.TIMEOUT)
    assert (d.s.status, d.s.render_ms) == (Status.FAILED, 60_000)
    d.requeue()
    assert (d.s.status, d.s.render_ms) == (Status.QUEUED, 0)


def test_timeout_while_a_cancel_is_pending_confirms_the_cancel() -> None:
    d = leased_job(timeout_ms=60_000)
    d.cancel()
    assert kinds(fire(d, TimerKind.TIMEOUT)) == ["AttemptFailed", "JobCancelled"]
    assert d.s.attempts_used == 0


def test_a_completion_in_the_log_before_the_timeout_wins() -> None:
    d = long_lease(timeout_ms=60_000)
    t = timer(d, TimerKind.TIMEOUT)
    d.send(c.CompleteJob("done", d.job_id, 1, "w1", "k", "sha", 1), at=T0 + 59_000)
    assert rejection(d.send(t.command(), at=T0 + 60_000)) == "terminal"
    assert d.s.status == Status.SUCCEEDED


# --- stuck --------------------------------------------------------------------------------------------------


def test_stuck_rule_is_armed_at_the_grant_with_the_floor_alone() -> None:
    d = leased_job(stuck_steps=10, stuck_min_ms=60_000)
    t = timer(d, TimerKind.STUCK)
    assert (t.at_ms, t.epoch) == (T0 + 60_000, 1)
    assert t.command().rule == "stuck"
    assert limits.expected_step_ms(d.s) is None


def test_expected_step_time_is_measured_from_the_lease_and_moves_the_deadline() -> None:
    d = leased_job(stuck_steps=10, stuck_min_ms=5_000)
    d.send(c.ReportProgress("p1", d.job_id, 1, "w1", 4, 20.0), at=T0 + 8_000)  # 2 s per step
    assert limits.expected_step_ms(d.s) == 2_000
    assert timer(d, TimerKind.STUCK).at_ms == T0 + 8_000 + 20_000
    # A report naming the same step is no advance: the deadline stays.
    d.send(c.ReportProgress("p2", d.job_id, 1, "w1", 4, 20.0), at=T0 + 12_000)
    assert timer(d, TimerKind.STUCK).at_ms == T0 + 28_000
    # A checkpoint at a higher step is one.
    d.send(c.RecordCheckpoint("k", d.job_id, 1, "w1", "ck/6", 6, 30.0, "sum", 1), at=T0 + 12_000)
    assert timer(d, TimerKind.STUCK).at_ms == T0 + 12_000 + 20_000


def test_a_lease_whose_step_stopped_is_failed_retryably_and_requeued_after_backoff() -> None:
    d = leased_job(stuck_steps=10, stuck_min_ms=5_000)
    d.send(c.ReportProgress("p1", d.job_id, 1, "w1", 4, 20.0), at=T0 + 8_000)
    # The worker keeps renewing while its step hangs: the lease stays alive, the stuck rule ends it.
    for i in range(1, 5):
        d.send(c.RenewLease(f"r{i}", d.job_id, 1, "w1"), at=T0 + 8_000 + i * 5_000)
    out = fire(d, TimerKind.STUCK)
    assert kinds(out) == ["AttemptFailed", "JobScheduled"]
    assert (out[0].error_code, out[0].retryable, out[0].attempts_used) == ("stuck", True, 1)
    assert "after step 4" in out[0].error_message
    assert out[1].reason == "backoff" and d.s.lease is None
    assert rejection(d.renew(epoch=1, worker="w1")) == "stale_epoch"
    # Back in the queue once the backoff is over, for another worker.
    d.send(c.ActivateJob("a", d.job_id), at=d.s.run_at_ms)
    assert d.s.status == Status.QUEUED


def test_the_worker_reporting_stuck_is_the_same_failure() -> None:
    d = leased_job()
    out = d.send(c.FailJob("f", d.job_id, 1, "w1", "stuck", "no step for 130 s"), at=T0 + 20_000)
    assert kinds(out) == ["AttemptFailed", "JobScheduled"]


def test_stuck_rule_is_off_in_the_finishing_phases_and_when_disabled() -> None:
    d = leased_job()
    d.progress(96.0, step=20, phase="decoding")
    assert timer(d, TimerKind.STUCK) is None
    assert rejection(d.send(c.ExpireLease("x", d.job_id, 1, "stuck"), at=T0 + 10**7)) == "not_due"
    assert timer(leased_job(stuck_steps=0), TimerKind.STUCK) is None


def test_an_advance_before_the_stuck_timer_in_the_log_makes_it_moot() -> None:
    d = leased_job(stuck_min_ms=5_000)
    t = timer(d, TimerKind.STUCK)
    d.send(c.ReportProgress("p", d.job_id, 1, "w1", 1, 5.0), at=T0 + 4_999)
    assert rejection(d.send(t.command(), at=T0 + 5_000)) == "not_due"
    assert d.s.status == Status.RUNNING


def test_stuck_on_every_lease_dead_letters_at_max_attempts() -> None:
    d = leased_job(stuck_min_ms=5_000, max_attempts=2, backoff_base_ms=0, backoff_max_ms=0)
    fire(d, TimerKind.STUCK)
    d.send(c.ActivateJob("a", d.job_id), at=d.s.run_at_ms)
    d.send(c.GrantLease("g2", d.job_id, "w2", d.s.pool, TTL), at=d.now)
    out = fire(d, TimerKind.STUCK)
    assert kinds(out) == ["AttemptFailed", "JobDeadLettered"] and out[1].reason == "max_attempts"


def test_an_unknown_rule_is_refused() -> None:
    d = leased_job()
    assert rejection(d.send(c.ExpireLease("x", d.job_id, 1, "bogus"), at=T0 + 10**7)) == "invalid_request"


# --- retry policy limits --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("overrides", "field"), [
    ({"max_attempts": 0}, "max_attempts"),
    ({"max_attempts": limits.MAX_ATTEMPTS + 1}, "max_attempts must be between 1 and 20"),
    ({"backoff_base_ms": 2_000, "backoff_max_ms": 1_000}, "backoff"),
    ({"backoff_base_ms": 0, "backoff_max_ms": limits.MAX_BACKOFF_MS + 1}, "backoff_max_ms"),
    ({"timeout_ms": 999}, "timeout_ms must be null or between 1000"),
    ({"timeout_ms": limits.MAX_TIMEOUT_MS + 1}, "timeout_ms"),
    ({"stuck_steps": -1}, "stuck_steps"),
    ({"stuck_min_ms": 10}, "stuck_min_ms"),
])
def test_submission_beyond_the_policy_limits_is_refused_naming_the_field(overrides: dict, field: str) -> None:
    d = Driver()
    out = d.submit(**overrides)
    assert rejection(out) == "invalid_request" and field in out[0].detail
    assert submission_problem(submit(**overrides)) is not None


def test_the_policy_is_recorded_and_folded() -> None:
    d = Driver()
    out = d.submit(max_attempts=7, backoff_base_ms=1_000, backoff_max_ms=9_000, timeout_ms=600_000,
                   stuck_steps=4, stuck_min_ms=30_000)
    got = out[0]
    assert (got.max_attempts, got.backoff_base_ms, got.backoff_max_ms, got.timeout_ms, got.stuck_steps,
            got.stuck_min_ms) == (7, 1_000, 9_000, 600_000, 4, 30_000)
    s = d.s
    assert (s.max_attempts, s.timeout_ms, s.stuck_steps, s.stuck_min_ms) == (7, 600_000, 4, 30_000)


# --- properties -----------------------------------------------------------------------------------------------

_ops = st.lists(st.tuples(st.sampled_from(["advance", "same", "renew", "release", "fail", "grant", "activate",
                                            "decode"]),
                          st.integers(1, 40_000)), max_size=40)


def _fire_due(d: Driver, now: int) -> None:
    """The scheduler on time: every timeout or stuck timer due by `now` fires at its due time."""
    while not d.s.is_terminal:
        due = sorted((t for t in timers_for(d.state) if t.kind in (TimerKind.TIMEOUT, TimerKind.STUCK)
                      and t.at_ms <= now), key=lambda t: t.at_ms)
        if not due:
            return
        t = due[0]
        assert d.s.lease is not None and t.at_ms >= d.s.lease.granted_at_ms
        before = d.s.attempts_used
        out = d.send(t.command(), at=max(d.now, t.at_ms))
        names = kinds(out)
        if t.kind == TimerKind.TIMEOUT:
            assert names == ["AttemptFailed", "JobFailed"] and out[1].reason == "timeout"
        else:
            assert names[0] == "AttemptFailed" and names[1] in ("JobScheduled", "JobDeadLettered")
            assert d.s.attempts_used == before + 1


@settings(max_examples=examples(150), deadline=None)
@given(timeout=st.integers(limits.MIN_TIMEOUT_MS, 300_000), steps=st.integers(0, 20),
       floor=st.integers(limits.MIN_STUCK_MS, 60_000), ops=_ops)
def test_time_limits_hold_whatever_happens(timeout: int, steps: int, floor: int, ops: list) -> None:
    """Whatever the workers do, with the scheduler firing timers when due: the rendering time recorded never
    exceeds the timeout; a timeout ends the job as failed(timeout) and nothing else; a stuck verdict costs
    one attempt and leaves the job retrying or dead-lettered; timers are never due before their lease; and
    the fold of the history equals the state."""
    d = leased_job(timeout_ms=timeout, stuck_steps=steps, stuck_min_ms=floor, max_attempts=20,
                   max_preemptions=200, poison_threshold=1_000)
    step = 0
    for op, dt in ops:
        now = d.now + dt
        _fire_due(d, now)
        if d.s.is_terminal:
            break
        lease = d.s.lease
        if op in ("advance", "same", "decode", "renew", "release", "fail") and lease is not None:
            e, w = lease.epoch, lease.worker_id
            if op in ("advance", "same", "decode"):
                step += op == "advance"
                phase = "decoding" if op == "decode" else "denoising"
                d.send(c.ReportProgress(d.next_id(), d.job_id, e, w, step, min(99.0, step), phase), at=now)
            elif op == "renew":
                d.send(c.RenewLease(d.next_id(), d.job_id, e, w), at=now)
            elif op == "release":
                d.send(c.ReleaseLease(d.next_id(), d.job_id, e, w), at=now)
            else:
                d.send(c.FailJob(d.next_id(), d.job_id, e, w, "oom", "x"), at=now)
        elif op == "grant" and d.s.status == Status.QUEUED:
            d.send(c.GrantLease(d.next_id(), d.job_id, "w", d.s.pool, 10**9), at=now)
        elif op == "activate" and d.s.status == Status.SCHEDULED:
            d.send(c.ActivateJob(d.next_id(), d.job_id), at=max(now, d.s.run_at_ms or now))
        assert d.s.render_ms <= timeout
        t = timer(d, TimerKind.TIMEOUT)
        if t is not None:
            assert limits.render_ms_at(d.s, t.at_ms) == timeout
    if d.s.status == Status.FAILED:
        assert d.s.terminal_reason == "timeout" and d.s.render_ms == timeout
    assert fold(d.history) == d.state


def test_the_scheduler_table_keeps_the_marks_as_they_were() -> None:
    from spotreel.services.scheduler import statecodec

    d = long_lease(timeout_ms=60_000)
    d.send(c.ReportProgress("p1", d.job_id, 1, "w1", 4, 20.0), at=T0 + 8_000)
    d.send(c.ReleaseLease("r", d.job_id, 1, "w1"), at=T0 + 9_000)
    d.grant(ttl=10**9)
    d.send(c.ReportProgress("p2", d.job_id, 2, "w1", 2, 10.0), at=T0 + 12_000)
    assert d.s.step_mark == (2, T0 + 12_000) and d.s.render_ms == 9_000
    assert statecodec.loads(statecodec.dumps(d.s)) == d.s
