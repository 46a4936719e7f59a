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

Fencing is unchanged (the epoch, the holder and the deadline judge every command, against `with_renewal`),
and a job's history stays replayable: folding its events gives the stored state, which differs from the
owner's view only in a deadline that only moves later.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from spotreel.domain import events as ev
from spotreel.domain.evolve import evolve
from spotreel.domain.state import JobState, Status

# (lease epoch, deadline in ms) of the newest absorbed renewal of a job's lease.
Renewal = tuple[int, int]


def absorbed(state: JobState | None, events: Sequence[Any]) -> Any | None:
    """The single LeaseRenewed / ProgressReported in `events` if persisting it would change nothing of
    `state` but the lease deadline; None otherwise."""
    if state is None or state.lease is None or not state.lease.confirmed or len(events) != 1:
        return None
    event = events[0]
    if not isinstance(event, (ev.LeaseRenewed, ev.ProgressReported)) or event.epoch != state.lease.epoch:
        return None
    after = evolve(state, event)
    if after is None or after.lease is None:
        return None
    same = replace(after, version=state.version, updated_at_ms=state.updated_at_ms,
                   lease=replace(after.lease, expires_at_ms=state.lease.expires_at_ms))
    return event if same == state else None


def with_renewal(state: JobState | None, renewal: Renewal | None) -> JobState | None:
    """`state` with the deadline of an absorbed renewal of its current lease, when that one is later."""
    if state is None or renewal is None or state.lease is None:
        return state
    epoch, until = renewal
    if epoch != state.lease.epoch or until <= state.lease.expires_at_ms:
        return state
    return replace(state, lease=replace(state.lease, expires_at_ms=until))


def after_handover(state: JobState | None, now_ms: int) -> Renewal | None:
    """The deadline a new owner gives a held lease: a full TTL from `now_ms` (the takeover), never less
    than the stored one."""
    if state is None or state.lease is None or state.status not in Status.HOLDING_LEASE:
        return None
    lease = state.lease
    return lease.epoch, max(lease.expires_at_ms, now_ms + lease.ttl_ms)
