"""Leases under load: a lease holder's command is judged at the time it entered the commands log, so an owner
that reads the log late never turns a renewal sent in time into an expiry (DESIGN invariant 8), and a
holder that went silent still loses its lease one TTL after its last command."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.domain import commands as c
from spotreel.domain.decide import decide
from spotreel.domain.evolve import evolve
from spotreel.domain.leases import judged_at
from spotreel.domain.state import JobState, Status
from spotreel.domain.timers import Timer, TimerKind
from spotreel.services.scheduler.partition import PartitionState
from tests.unit.jobkit import T0, TTL, kinds, leased_job
from tests.harness.hypothesis_profiles import examples

pytestmark = pytest.mark.unit


def test_lease_commands_are_judged_at_their_append_time_others_at_the_owners_clock() -> None:
    renew = c.RenewLease("r", "j", 1, "w1")
    expire = c.ExpireLease("x", "j", 1)
    grant = c.GrantLease("g", "j", "w1", "p", TTL)
    cancel = c.CancelJob("k", "j", "user")
    assert judged_at(renew, now_ms=T0 + 50_000, appended_ms=T0) == T0
    assert judged_at(expire, now_ms=T0 + 50_000, appended_ms=T0 + 10) == T0 + 10
    # A grant's TTL starts when it is made; other commands are not about lease time at all.
    assert judged_at(grant, now_ms=T0 + 50_000, appended_ms=T0) == T0 + 50_000
    assert judged_at(cancel, now_ms=T0 + 50_000, appended_ms=T0) == T0 + 50_000
    # No append time (a CreateTime topic): the owner's clock, as before.
    assert judged_at(renew, now_ms=T0 + 5, appended_ms=None) == T0 + 5
    # An append time ahead of the owner's clock is not trusted to extend anything.
    assert judged_at(renew, now_ms=T0, appended_ms=T0 + 60_000) == T0


def _apply(state, command, now_ms, appended_ms):
    out = decide(state, command, judged_at(command, now_ms, appended_ms))
    for e in out:
        state = evolve(state, e)
    return state, out


@settings(max_examples=examples(200), deadline=None)
@given(gaps=st.lists(st.integers(min_value=1, max_value=TTL - 1), min_size=1, max_size=12),
       backlog=st.integers(min_value=0, max_value=10 * TTL))
def test_renewals_sent_in_time_keep_the_lease_however_late_they_are_read(gaps: list[int], backlog: int) -> None:
    """Renewals appended less than a TTL apart, read `backlog` ms late, then an ExpireLease appended once the
    owner's clock passed the last recorded expiry: the lease survives every renewal and the ExpireLease is
    refused, because the log puts it after them."""
    d = leased_job()
    state = d.s
    epoch, worker = d.lease()
    appended = T0
    for i, gap in enumerate(gaps):
        appended += gap
        state, out = _apply(state, c.RenewLease(f"r{i}", state.job_id, epoch, worker), appended + backlog, appended)
        assert kinds(out) == ["LeaseRenewed"], out
    assert state.lease.expires_at_ms == appended + TTL
    # The timer fired on the owner's clock at the old expiry; its record is appended after the renewals.
    state, out = _apply(state, c.ExpireLease("x", state.job_id, epoch), appended + backlog + 1, appended + 1)
    assert kinds(out) == ["CommandRejected"] and out[0].reason == "lease_not_expired"
    assert state.status in Status.HOLDING_LEASE


@settings(max_examples=examples(100), deadline=None)
@given(silence=st.integers(min_value=TTL, max_value=5 * TTL), backlog=st.integers(min_value=0, max_value=5 * TTL))
def test_a_silent_holder_loses_its_lease_one_ttl_after_its_last_command(silence: int, backlog: int) -> None:
    d = leased_job()
    state = d.s
    epoch, worker = d.lease()
    state, _ = _apply(state, c.RenewLease("r", state.job_id, epoch, worker), T0 + 1_000 + backlog, T0 + 1_000)
    state, out = _apply(state, c.ExpireLease("x", state.job_id, epoch), T0 + 1_000 + silence + backlog,
                        T0 + 1_000 + silence)
    assert kinds(out) == ["LeaseExpired", "JobRequeued"]
    # A renewal appended after the deadline is late however soon it is read.
    late = leased_job()
    s2 = late.s
    e2, w2 = late.lease()
    s2, out = _apply(s2, c.RenewLease("r", s2.job_id, e2, w2), T0 + TTL, T0 + TTL)
    assert kinds(out) == ["CommandRejected"] and out[0].reason == "lease_expired"


def _watched_lease() -> tuple[JobState, PartitionState, int]:
    """A leased job's state, a partition that has seen it (its expiry timer armed) and the lease's deadline."""
    s = leased_job().s
    part = PartitionState(0)
    part.observe(None, s)
    return s, part, s.lease.expires_at_ms


def test_expiry_timers_wait_for_the_log_to_pass_their_deadline() -> None:
    s, part, deadline = _watched_lease()
    part.arm(Timer(TimerKind.ACTIVATE, "other", deadline))
    states = {s.job_id: s}
    # The clock is past the deadline but the log has only been read up to before it: held back. Other
    # timers due by the clock still fire.
    fired = part.due(deadline + 5_000, states.get, lease_horizon_ms=deadline - 1)
    assert [t.kind for t in fired] == []  # the activation is stale (no such job): dropped, not fired
    assert part.held and part.next_timer_ms() == deadline
    assert part.due(deadline + 6_000, states.get, lease_horizon_ms=deadline - 1) == []
    # The log reaches the deadline: the timer fires once.
    fired = part.due(deadline + 7_000, states.get, lease_horizon_ms=deadline)
    assert [(t.kind, t.key) for t in fired] == [(TimerKind.EXPIRE_LEASE, s.job_id)]
    assert not part.held and part.due(deadline + 8_000, states.get) == []


def test_a_caught_up_partition_fires_expiry_timers_by_the_clock() -> None:
    s, part, deadline = _watched_lease()
    assert part.due(deadline - 1, {s.job_id: s}.get) == []
    held = part.due(deadline, {s.job_id: s}.get, lease_horizon_ms=-1)
    assert held == [] and part.held
    # Caught up (no horizon): held timers come out too.
    fired = part.due(deadline + 1, {s.job_id: s}.get, lease_horizon_ms=None)
    assert [t.key for t in fired] == [s.job_id]


def test_a_renewal_read_during_the_hold_makes_the_held_timer_stale() -> None:
    s, part, deadline = _watched_lease()
    part.due(deadline + 1, {s.job_id: s}.get, lease_horizon_ms=deadline - 10)
    renewed = replace(s, version=s.version + 1, lease=replace(s.lease, expires_at_ms=deadline + TTL))
    part.observe(s, renewed)
    fired = part.due(deadline + 2, {s.job_id: renewed}.get, lease_horizon_ms=deadline + 1)
    assert fired == []  # the held timer names the old deadline: no longer wanted
    assert part.next_timer_ms() == deadline + TTL
