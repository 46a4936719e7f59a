"""The scheduler's per-partition timer heap: timers due at the same millisecond never compare Timer objects
(which have no order) and come out in one deterministic order: due time, kind, key, epoch, arrival."""

from __future__ import annotations

import heapq
from dataclasses import replace

from spotreel.domain.state import Status
from spotreel.domain.timers import Timer, TimerKind
from spotreel.services.scheduler.partition import PartitionState
from tests.unit.jobkit import T0, Driver, leased_job, submit

DUE = T0 + 5_000


def _scheduled(key: str):
    d = Driver()
    d.send(submit(key=key, run_at_ms=DUE))
    assert d.s.status == Status.SCHEDULED
    return d.s


def test_timers_due_at_the_same_time_come_out_in_a_total_order():
    part = PartitionState(0)
    states = {}
    # Two jobs scheduled for DUE and a lease expiring at DUE, armed in an order unlike the expected one.
    for key in ("zz", "aa"):
        s = _scheduled(key)
        states[s.job_id] = s
        part.observe(None, s)
    leased = leased_job(key="mm", stuck_steps=0).s  # its lease expiry is its only timer
    leased = replace(leased, lease=replace(leased.lease, expires_at_ms=DUE))
    states[leased.job_id] = leased
    part.observe(None, leased)
    # The same activation timer armed a second time (e.g. by a rebuild) must not break the heap either.
    twice = _scheduled("aa").job_id
    part.arm(Timer(TimerKind.ACTIVATE, twice, DUE))

    fired = part.due(DUE, states.get)
    activations = [j for j, s in states.items() if s.status == Status.SCHEDULED] + [twice]
    assert [(t.kind, t.key) for t in fired] == (
        [(TimerKind.ACTIVATE, j) for j in sorted(activations)] + [(TimerKind.EXPIRE_LEASE, leased.job_id)])
    assert part.heap == []


def test_heap_entries_never_reach_the_timer_objects():
    part = PartitionState(0)
    for epoch in (2, 1, 1):
        part.arm(Timer(TimerKind.EXPIRE_LEASE, "j1", DUE, epoch))
    # Identical timers differ in their arrival number, so comparison stops before the Timer.
    entries = [heapq.heappop(part.heap) for _ in range(3)]
    assert [e[3] for e in entries] == [1, 1, 2]
    assert entries[0][4] < entries[1][4]


def test_nothing_is_due_before_its_time():
    part = PartitionState(0)
    s = _scheduled("early")
    part.observe(None, s)
    assert part.due(DUE - 1, {s.job_id: s}.get) == []
    assert part.next_timer_ms() == DUE
