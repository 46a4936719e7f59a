"""Renewals that change nothing but the lease deadline are answered, not persisted.

A fleet renews every lease every few seconds (a heartbeat, or a progress report that names the step the job
is already at). Persisted as an event, each renewal costs a record on the events topic, a changelog write
of the whole job state, a read-model write and a version in the job's history, and all it records is a
deadline that the next renewal replaces. So the scheduler keeps such renewals in memory instead:

- `absorbed(state, events)`: the renewal event among `events` when applying it to `state` would change
  nothing but the lease's deadline (and the version / update time that every event bumps). The first
  renewal under a lease is never absorbed (it confirms the lease: a confirmed lease can no longer be handed
  back as unclaimed), nor is progress that moves the step, the percentage or the phase.
- `with_renewal(state, renewal)`: the state the owner judges commands and arms timers against: the stored
  state with the deadline of the newest absorbed renewal of the same lease, if that is later.
- `after_handover(state, now_ms)`: a new owner of the partition does not know the renewals the old one
  absorbed; it gives every held lease one full TTL from the moment it took over. A live holder renews within
  that TTL; a silent one expires at most one TTL later than it would have without the handover.
- `after_answer(view, epoch, sent_ms)`: a holder cannot renew a lease before it has heard of it, so a grant
  whose answer left the scheduler late (a pause between deciding it and sending its answer, or an answer
  sent again) gets one full TTL from the send. A silent holder expires at most that delay later.

Progress that moves the step (or the percentage) is throttled the same way, like heartbeat details in
Temporal: `absorbed(..., persist_every_ms)` also answers without an event a report that moves only the
position (step, percentages, the stuck rule's mark: nothing else changes, same phase) when the stored
state was written less than `persist_every_ms` ago (and less than half the job's stuck floor). The owner
keeps the newest such report as the job's `Pending` position; the view (`with_pending`) shows it, so
commands and timers (the stuck rule) are judged exactly as if it had been persisted. It is written, as the
event it already is, in front of the next event the job persists for any other reason (`flushed`), unless
that event is a report that supersedes it. So the history gets at most one progress event per interval
while the steps advance, the last position before a lease ends is never missing from it, and folding a
job's events still gives exactly the owner's view minus the newest unwritten position and deadline.

Fencing is unchanged (the epoch, the holder and the deadline judge every command, against the view), and a
job's history stays replayable: folding its events gives the stored state, which differs from the owner's
view only in a deadline that only moves later and a position that only moves forward.
"""

from __future__ import annotations

from spotreel.domain.records import replace
from typing import Any, Sequence

from spotreel.domain import events as ev
from spotreel.domain.evolve import evolve
from spotreel.domain.state import JobState, Status

# (lease epoch, deadline in ms) of the newest absorbed renewal of a job's lease.
Renewal = tuple[int, int]
# (stored version it was judged against, the report) of the newest absorbed progress that moved the position.
Pending = tuple[int, ev.ProgressReported]


def absorbed(state: JobState | None, events: Sequence[Any], persist_every_ms: int = 0) -> Any | None:
    """The single LeaseRenewed / ProgressReported in `events` if persisting it would change nothing of
    `state` but the lease deadline, or (`persist_every_ms` > 0) only the deadline and the position while
    `state` was written less than that long ago; None otherwise."""
    if state is None or state.lease is None or not state.lease.confirmed or len(events) != 1:
        return None
    event = events[0]
    if not isinstance(event, (ev.LeaseRenewed, ev.ProgressReported)) or event.epoch != state.lease.epoch:
        return None
    if isinstance(event, ev.LeaseRenewed):
        # Folding a renewal of the confirmed current lease changes its deadline and the version, nothing else
        # (evolve._with_expiry): the comparison below would always find it absorbed. A fleet's heartbeats are
        # most of the scheduler's commands, and that comparison (five state copies, a 55-field equality) was
        # most of their cost.
        return event
    after = evolve(state, event)
    if after is None or after.lease is None:
        return None
    same = replace(after, version=state.version, updated_at_ms=state.updated_at_ms,
                   lease=replace(after.lease, expires_at_ms=state.lease.expires_at_ms))
    if same == state:
        return event
    if not persist_every_ms or not isinstance(event, ev.ProgressReported):
        return None
    if event.at_ms - state.updated_at_ms >= min(persist_every_ms, state.stuck_min_ms // 2):
        return None
    return event if same == at_position(state, event) else None


def moves(state: JobState, report: Any) -> bool:
    """Whether an absorbed renewal moved the job's position (so it becomes the job's Pending one)."""
    return isinstance(report, ev.ProgressReported) and (report.step, report.progress_pct) != (state.step,
                                                                                            state.reported_pct)


def at_position(state: JobState, report: ev.ProgressReported) -> JobState:
    """`state` at the step and percentage of a report of the same phase: what evolving it changes besides
    the deadline and the version (progress.on_report and the stuck mark, evolve._stepped)."""
    mark = state.step_mark
    if mark is not None and report.step > mark[0]:
        mark = (report.step, report.at_ms)
    return replace(state, step=report.step, reported_pct=report.progress_pct,
                   progress_pct=max(state.progress_pct, report.progress_pct), step_mark=mark)


def with_pending(state: JobState | None, pending: Pending | None) -> JobState | None:
    """`state` at the position of the absorbed report, if it was judged against this very version (any
    persisted event since has written it, or superseded it) and the lease is the same."""
    if state is None or pending is None or state.lease is None:
        return state
    version, report = pending
    if version != state.version or report.epoch != state.lease.epoch:
        return state
    return at_position(state, report)


def flushed(pending: Pending | None, stored: JobState | None, events: Sequence[Any]) -> list[Any]:
    """The events to persist for a command decided against the view: the pending report first (it is what
    the view was at, renumbered after the stored version), then the command's own events renumbered after
    it; the report is left out when there is none for this version, the command was refused (no state
    changes, so the pending position still holds), or the command's events are a single
    report of the same lease past its step (it writes a newer position and stuck mark)."""
    if stored is None or with_pending(stored, pending) is stored \
            or all(isinstance(e, ev.CommandRejected) for e in events):  # a refusal changes no state
        return list(events)
    assert pending is not None
    report = pending[1]
    first = events[0]
    if (len(events) == 1 and isinstance(first, ev.ProgressReported) and first.epoch == report.epoch
            and first.step > report.step):
        return list(events)
    return [replace(report, version=stored.version + 1),
            *(e if isinstance(e, ev.CommandRejected) else replace(e, version=e.version + 1) for e in events)]


def with_renewal(state: JobState | None, renewal: Renewal | None) -> JobState | None:
    """`state` with the deadline of an absorbed renewal of its current lease, when that one is later."""
    if state is None or renewal is None or state.lease is None:
        return state
    epoch, until = renewal
    if epoch != state.lease.epoch or until <= state.lease.expires_at_ms:
        return state
    return replace(state, lease=replace(state.lease, expires_at_ms=until))


def after_answer(view: JobState | None, epoch: int, sent_ms: int) -> Renewal | None:
    """The deadline of the lease `epoch` whose grant was answered at `sent_ms`: a full TTL from the send, when
    that is later than the deadline the owner judges by (`view`: stored state and absorbed renewals); None
    when the lease is no longer held or the send moves nothing."""
    if view is None or view.lease is None or view.lease.epoch != epoch:
        return None
    grace = after_handover(view, sent_ms)  # the same rule: a full TTL from a moment, never less
    return grace if grace is not None and grace[1] > view.lease.expires_at_ms else None


def after_handover(state: JobState | None, now_ms: int) -> Renewal | None:
    """The deadline a new owner gives a held lease: a full TTL from `now_ms` (the takeover), never less
    than the stored one."""
    if state is None or state.lease is None or state.status not in Status.HOLDING_LEASE:
        return None
    lease = state.lease
    return lease.epoch, max(lease.expires_at_ms, now_ms + lease.ttl_ms)
