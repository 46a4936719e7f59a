"""Timers derived from state, and the commands they send."""

from __future__ import annotations

import pytest

from spotreel.domain import commands as c
from spotreel.domain.timers import Timer, TimerKind, schedule_timers, timers_for
from tests.unit.jobkit import T0, TTL, Driver, kinds, leased_job
from tests.unit.test_job_schedules import HOUR, Sched, T

pytestmark = pytest.mark.unit


def test_a_leased_job_needs_its_expiry_timer_and_the_timer_expires_it() -> None:
    d = leased_job(stuck_steps=0)  # the stuck rule's timer: tests/unit/test_job_limits.py
    (timer,) = timers_for(d.state)
    assert (timer.kind, timer.at_ms, timer.epoch) == (TimerKind.EXPIRE_LEASE, T0 + TTL, 1)
    command = timer.command()
    assert isinstance(command, c.ExpireLease) and command.epoch == 1
    assert command.command_id == f"timer:expire_lease:{d.job_id}:e1@{T0 + TTL}"
    assert kinds(d.send(command, at=timer.at_ms)) == ["LeaseExpired", "JobRequeued"]
    assert timers_for(d.state) == ()


def test_a_renewal_moves_the_timer() -> None:
    d = leased_job()
    d.send(c.RenewLease("r", d.job_id, 1, "w1"), advance=10_000)
    assert timers_for(d.state)[0].at_ms == T0 + 10_000 + TTL


def test_a_scheduled_job_needs_its_activation_timer() -> None:
    d = Driver()
    d.submit(run_at_ms=T0 + 5_000)
    (timer,) = timers_for(d.state)
    assert (timer.kind, timer.at_ms, timer.epoch) == (TimerKind.ACTIVATE, T0 + 5_000, None)
    assert kinds(d.send(timer.command(), at=timer.at_ms)) == ["JobQueued"]


def test_idle_paused_and_unknown_jobs_need_no_timer() -> None:
    d = Driver()
    assert timers_for(None) == ()
    d.submit()
    assert timers_for(d.state) == ()
    d.pause()
    assert timers_for(d.state) == ()


def test_schedules_need_their_next_occurrence_until_deleted() -> None:
    s = Sched()
    (timer,) = schedule_timers(s.state)
    assert (timer.kind, timer.key, timer.at_ms) == (TimerKind.FIRE_OCCURRENCE, "nightly", T + HOUR)
    out = s.send(timer.command(), timer.at_ms)
    assert [type(e).__name__ for e in out] == ["OccurrenceFired", "ScheduleAdvanced"]
    s.send(c.DeleteSchedule("d", "nightly"), T + HOUR)
    assert schedule_timers(s.state) == () and schedule_timers(None) == ()
    assert Timer(TimerKind.FIRE_OCCURRENCE, "x", 5).command() == c.FireOccurrence("timer:fire_occurrence:x:5", "x")
