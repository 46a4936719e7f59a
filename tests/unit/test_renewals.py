"""Renewals answered without an event (domain/renewals.py): the scheduler's way of handling a lease's
commands (absorb what changes only the deadline, persist the rest, judge against the stored state plus the
absorbed deadline) decides exactly what persisting every renewal would have decided."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.domain.decide import decide
from spotreel.domain.evolve import fold
from spotreel.domain.renewals import (absorbed, after_answer, after_handover, flushed, moves, with_pending,
                                      with_renewal)
from tests.unit.jobkit import T0, TTL, Driver, rejection
from tests.harness.hypothesis_profiles import examples


def _leased(confirm: bool = True) -> Driver:
    d = Driver()
    d.submit()
    d.grant("w1")
    if confirm:
        d.send(c.RenewLease("first", d.job_id, d.s.epoch, "w1"), advance=1_000)
    return d


def test_the_first_renewal_confirms_the_lease_and_is_persisted() -> None:
    d = _leased(confirm=False)
    events = decide(d.s, c.RenewLease("r1", d.job_id, d.s.epoch, "w1"), d.now + 1_000)
    assert isinstance(events[0], ev.LeaseRenewed) and absorbed(d.s, events) is None


def test_a_later_renewal_and_progress_at_the_same_step_are_absorbed_a_new_step_is_not() -> None:
    d = _leased()
    d.send(c.ReportProgress("p0", d.job_id, d.s.epoch, "w1", 3, 15.0), advance=1_000)
    now = d.now + 2_000
    renew = decide(d.s, c.RenewLease("r2", d.job_id, d.s.epoch, "w1"), now)
    same = decide(d.s, c.ReportProgress("p1", d.job_id, d.s.epoch, "w1", 3, 15.0), now)
    moved = decide(d.s, c.ReportProgress("p2", d.job_id, d.s.epoch, "w1", 4, 20.0), now)
    phase = decide(d.s, c.ReportProgress("p3", d.job_id, d.s.epoch, "w1", 3, 15.0, "decoding"), now)
    assert absorbed(d.s, renew) is renew[0] and renew[0].lease_expires_at_ms == now + TTL
    assert absorbed(d.s, same) is same[0]
    assert absorbed(d.s, moved) is None and absorbed(d.s, phase) is None
    # Rejections, checkpoints and other holders' commands are never absorbed.
    stale = decide(d.s, c.RenewLease("r3", d.job_id, d.s.epoch - 1, "w1"), now)
    other = decide(d.s, c.RenewLease("r4", d.job_id, d.s.epoch, "w2"), now)
    assert isinstance(stale[0], ev.CommandRejected) and absorbed(d.s, stale) is None
    assert isinstance(other[0], ev.CommandRejected) and absorbed(d.s, other) is None


def test_the_view_only_ever_moves_a_deadline_of_the_same_lease_later() -> None:
    d = _leased()
    s = d.s
    later = with_renewal(s, (s.epoch, s.lease.expires_at_ms + 5_000))
    assert later.lease.expires_at_ms == s.lease.expires_at_ms + 5_000
    assert replace(later, lease=s.lease) == s
    assert with_renewal(s, (s.epoch, s.lease.expires_at_ms - 5_000)) is s  # never shortened
    assert with_renewal(s, (s.epoch - 1, s.lease.expires_at_ms + 5_000)) is s  # another lease's
    assert with_renewal(s, None) is s


def test_a_new_owner_gives_every_held_lease_a_full_ttl_from_the_takeover() -> None:
    d = _leased()
    s = d.s
    epoch, until = after_handover(s, s.lease.expires_at_ms + 60_000)  # long after the stored deadline
    assert (epoch, until) == (s.epoch, s.lease.expires_at_ms + 60_000 + TTL)
    assert after_handover(s, T0)[1] == s.lease.expires_at_ms  # never earlier than the stored one
    ended = d.send(c.ExpireLease("x", d.job_id, s.epoch), at=s.lease.expires_at_ms + 1)
    assert isinstance(ended[0], ev.LeaseExpired) and after_handover(d.s, d.now) is None


def test_a_grant_answered_late_runs_a_full_ttl_from_its_answer() -> None:
    d = _leased(confirm=False)
    s = d.s
    late = s.lease.granted_at_ms + 15_000  # the scheduler was frozen between the grant and its answer
    assert after_answer(s, s.epoch, late) == (s.epoch, late + TTL)
    # The holder renews (its first renewal, the confirmation) within a TTL of the answer, past the stored
    # deadline: judged against the owner's view it holds; against the stored state it would have expired.
    view = with_renewal(s, after_answer(s, s.epoch, late))
    renew_at = late + TTL - 1
    assert isinstance(decide(view, c.RenewLease("r1", d.job_id, s.epoch, "w1"), renew_at)[0], ev.LeaseRenewed)
    assert rejection(decide(s, c.RenewLease("r1", d.job_id, s.epoch, "w1"), renew_at)) == "lease_expired"
    # A silent holder still expires, a TTL after the answer.
    assert isinstance(decide(view, c.ExpireLease("x", d.job_id, s.epoch), late + TTL)[0], ev.LeaseExpired)


def test_an_answer_never_shortens_a_lease_nor_touches_another_one() -> None:
    d = _leased()
    s = d.s
    assert after_answer(s, s.epoch, s.lease.expires_at_ms - TTL) is None  # answered at once: nothing moves
    renewed = with_renewal(s, (s.epoch, s.lease.expires_at_ms + 50_000))
    assert after_answer(renewed, s.epoch, s.lease.granted_at_ms + 1_000) is None  # an absorbed renewal is later
    assert after_answer(s, s.epoch - 1, s.lease.granted_at_ms + 60_000) is None  # an answer of an older lease
    assert after_answer(None, 1, T0) is None
    d.send(c.ExpireLease("x", d.job_id, s.epoch), at=s.lease.expires_at_ms + 1)
    assert after_answer(d.s, s.epoch, d.now) is None  # that lease is over


@given(st.integers(0, 120_000), st.integers(0, 120_000))
def test_an_answer_deadline_is_the_later_of_the_owners_and_a_ttl_after_the_send(held: int, delay: int) -> None:
    d = _leased(confirm=False)
    view = with_renewal(d.s, (d.s.epoch, d.s.lease.expires_at_ms + held))
    sent = d.s.lease.granted_at_ms + delay
    grace = after_answer(view, d.s.epoch, sent)
    after = with_renewal(view, grace).lease.expires_at_ms
    assert after == max(view.lease.expires_at_ms, sent + TTL)


# -- the equivalence ------------------------------------------------------------------------------------

_command = st.tuples(
    st.sampled_from(["renew", "renew", "progress_same", "progress_next", "checkpoint", "expire", "stale",
                     "other_worker"]),
    st.integers(0, 40_000),  # ms since the previous command
)


def _make(kind: str, i: int, job_id: str, epoch: int, step: int) -> object:
    if kind == "renew":
        return c.RenewLease(f"r{i}", job_id, epoch, "w1")
    if kind == "progress_same":
        return c.ReportProgress(f"p{i}", job_id, epoch, "w1", step, 5.0 * step)
    if kind == "progress_next":
        return c.ReportProgress(f"p{i}", job_id, epoch, "w1", min(step + 1, 19), 5.0 * min(step + 1, 19))
    if kind == "checkpoint":
        return c.RecordCheckpoint(f"k{i}", job_id, epoch, "w1", f"ck/{i}", step, 5.0 * step, "0" * 64, 10)
    if kind == "expire":
        return c.ExpireLease(f"x{i}", job_id, epoch)
    if kind == "stale":
        return c.RenewLease(f"s{i}", job_id, epoch - 1, "w1")
    return c.RenewLease(f"o{i}", job_id, epoch, "w2")


def _shape(events) -> list[tuple]:
    return [(type(e).__name__, getattr(e, "reason", None), getattr(e, "lease_expires_at_ms", None))
            for e in events]


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(_command, min_size=1, max_size=40), st.sampled_from([0, 15_000, 30_000]))
def test_absorbing_renewals_decides_exactly_what_persisting_them_decides(script, every_ms) -> None:
    d = _leased()
    persisted = d.s  # every event applied
    stored, renewal, pending = d.s, None, None  # the scheduler: stored state + absorbed deadline and position
    history = []  # what the scheduler wrote
    now = d.now
    for i, (kind, gap) in enumerate(script):
        now += gap
        lease = persisted.lease
        command = _make(kind, i, d.job_id, lease.epoch if lease else persisted.epoch, persisted.step)
        expected = decide(persisted, command, now)
        persisted = fold(expected, persisted)

        judged = with_pending(with_renewal(stored, renewal), pending)
        got = decide(judged, command, now)
        assert _shape(got) == _shape(expected), (kind, i)
        renewed = absorbed(judged, got, every_ms)
        if renewed is not None:
            renewal = (renewed.epoch, renewed.lease_expires_at_ms)
            if moves(judged, renewed):
                pending = (stored.version, renewed)
        else:
            written = flushed(pending, stored, got)
            changes = [e.version for e in written if not isinstance(e, ev.CommandRejected)]
            assert changes == list(range(stored.version + 1, stored.version + 1 + len(changes)))
            history.extend(written)
            stored = fold(written, stored)
            if renewal is not None and (stored.lease is None or stored.lease.epoch != renewal[0]):
                renewal = None
        # The owner's view is the fully persisted state but for the bookkeeping of the events not written.
        view = with_pending(with_renewal(stored, renewal), pending)
        assert replace(view, version=0, updated_at_ms=0) == replace(persisted, version=0, updated_at_ms=0)
        # ... and the history folds to the stored state.
        assert fold(history, d.s) == stored


def test_a_moved_position_is_absorbed_within_the_interval_and_written_before_the_next_event() -> None:
    d = _leased()
    every = 20_000  # within the 30 s TTL
    d.send(c.ReportProgress("p0", d.job_id, d.s.epoch, "w1", 1, 5.0), advance=1_000)  # running, denoising
    stored = d.s
    now = stored.updated_at_ms + 5_000
    moved = decide(stored, c.ReportProgress("p1", d.job_id, d.s.epoch, "w1", 2, 10.0), now)
    assert absorbed(stored, moved) is None  # without throttling: written
    assert absorbed(stored, moved, every) is moved[0] and moves(stored, moved[0])
    pending = (stored.version, moved[0])
    view = with_pending(stored, pending)
    assert (view.step, view.progress_pct, view.version) == (2, 10.0, stored.version)
    # Past the interval the next step is written, and it supersedes the pending one.
    later = decide(view, c.ReportProgress("p2", d.job_id, d.s.epoch, "w1", 3, 15.0), stored.updated_at_ms + every)
    assert absorbed(view, later, every) is None and flushed(pending, stored, later) == list(later)
    # Another event (a checkpoint) is written after the pending report.
    ck = decide(view, c.RecordCheckpoint("k", d.job_id, d.s.epoch, "w1", "ck/1", 2, 10.0, "0" * 64, 10), now + 1)
    written = flushed(pending, stored, ck)
    assert [type(e).__name__ for e in written] == ["ProgressReported", "CheckpointRecorded"]
    assert fold(written, stored).step == 2
    # A phase change is never absorbed, nor is progress once the stored state is older than half the stuck floor.
    decoding = decide(view, c.ReportProgress("p3", d.job_id, d.s.epoch, "w1", 2, 10.0, "decoding"), now + 2)
    assert absorbed(view, decoding, every) is None
    short = replace(stored, stuck_min_ms=8_000)
    assert absorbed(short, decide(short, c.ReportProgress("p4", d.job_id, d.s.epoch, "w1", 2, 10.0), now), every) is None


def test_the_owners_view_is_built_once_per_renewal_and_always_equals_its_inputs() -> None:
    # PartitionState.view hands the last view out again while the stored state, the absorbed deadline and the
    # pending position are the very same objects; any of them new, it is built again.
    from spotreel.services.scheduler.partition import PartitionState

    d = _leased()
    part = PartitionState(0)
    stored = d.s
    part.observe(None, stored)
    assert part.view(stored) is stored  # nothing absorbed: the stored state itself
    renewal = ev.LeaseRenewed(d.job_id, stored.version, d.now + 5_000, "r1", stored.epoch, d.now + 5_000 + TTL)
    part.absorb(stored, (renewal.epoch, renewal.lease_expires_at_ms), renewal)
    first = part.view(stored)
    assert first.lease.expires_at_ms == d.now + 5_000 + TTL
    assert part.view(stored) is first  # the same inputs: the same view
    assert first == with_pending(with_renewal(stored, part.renewals[d.job_id]), None)
    report = ev.ProgressReported(d.job_id, stored.version, d.now + 6_000, "p1", stored.epoch, 4, 20.0, "denoising",
                                 d.now + 6_000 + TTL)
    part.absorb(stored, (report.epoch, report.lease_expires_at_ms), report)
    moved = part.view(stored)
    assert moved is not first and (moved.step, moved.lease.expires_at_ms) == (4, d.now + 6_000 + TTL)
    # A state written since (a new object, the renewal folded in): built from it, not the old view.
    d.send(c.RenewLease("r2", d.job_id, stored.epoch, "w1"), advance=7_000)
    part.observe(stored, d.s)
    assert part.view(d.s) == with_pending(with_renewal(d.s, part.renewals.get(d.job_id)),
                                          part.pending.get(d.job_id))
    # The lease over: nothing absorbed is kept, and no view either.
    d.send(c.ExpireLease("x", d.job_id, d.s.epoch), advance=60_000)
    part.observe(stored, d.s)
    assert part.view(d.s) is d.s and d.job_id not in part._views
