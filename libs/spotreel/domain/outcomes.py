"""Building the events a decision returns: headers, version numbering, rejections and their reason codes.

Handlers build events with version 0 and `number` assigns consecutive versions after the state's, so no
handler can get the numbering wrong. Rejections keep the version they were judged against (events.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from spotreel.domain.records import replace
from typing import Any, TypeVar

from spotreel.domain.events import CommandRejected
from spotreel.domain.state import JobState

E = TypeVar("E")


class Reason:
    UNKNOWN_JOB = "unknown_job"
    UNKNOWN_COMMAND = "unknown_command"
    TERMINAL = "terminal"
    # The job ended and left the scheduler's table after its retention (retention.py).
    EVICTED = "evicted"
    INVALID_REQUEST = "invalid_request"
    JOB_ID_MISMATCH = "job_id_mismatch"
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    # Fencing.
    STALE_EPOCH = "stale_epoch"
    UNKNOWN_EPOCH = "unknown_epoch"
    WORKER_MISMATCH = "worker_mismatch"
    LEASE_EXPIRED = "lease_expired"
    LEASE_NOT_EXPIRED = "lease_not_expired"
    # An "unclaimed" release of a lease whose holder already sent commands under it (it has the lease).
    LEASE_IN_USE = "lease_in_use"
    # Status.
    NOT_QUEUED = "not_queued"
    POOL_MISMATCH = "pool_mismatch"
    NOT_SCHEDULED = "not_scheduled"
    NOT_DUE = "not_due"
    NOT_PAUSED = "not_paused"
    ALREADY_PAUSED = "already_paused"
    CANCEL_REQUESTED = "cancel_requested"
    PAUSE_REQUESTED = "pause_requested"
    PREEMPT_REQUESTED = "preempt_requested"
    # PreemptLease for waiting work whose tier is not above the job's own.
    NOT_LOWER_TIER = "not_lower_tier"
    NOT_REQUEUEABLE = "not_requeueable"
    PRIORITY_UNCHANGED = "priority_unchanged"
    NOT_A_PARENT = "not_a_parent"
    PARENT_ALREADY_RESOLVED = "parent_already_resolved"
    CHECKPOINT_NOT_NEWER = "checkpoint_not_newer"
    INVALID_PROGRESS = "invalid_progress"


@dataclass(frozen=True)
class Head:
    """The fields every event of one decision shares."""

    job_id: str
    at_ms: int
    causation_id: str

    def event(self, cls: type[E], **fields: Any) -> E:
        # Every job event class takes these four; a TypeVar cannot say so of a class's constructor.
        return cls(job_id=self.job_id, version=0, at_ms=self.at_ms, causation_id=self.causation_id,  # type: ignore[call-arg]
                   **fields)


def number(state: JobState | None, events: tuple[Any, ...]) -> tuple[Any, ...]:
    """Consecutive versions after the state's. A rejection is returned as built (it takes no slot)."""
    if len(events) == 1 and isinstance(events[0], CommandRejected):
        return events
    base = state.version if state is not None else 0
    return tuple(replace(e, version=base + i) for i, e in enumerate(events, start=1))


def rejected(state: JobState | None, command: Any, now_ms: int, reason: str, detail: str = "") -> tuple[Any]:
    return (
        CommandRejected(
            job_id=str(getattr(command, "job_id", "")),
            version=state.version if state is not None else 0,
            at_ms=now_ms,
            causation_id=str(getattr(command, "command_id", "")),
            command_id=str(getattr(command, "command_id", "")),
            command_type=type(command).__name__,
            reason=reason,
            detail=detail,
            epoch_given=getattr(command, "epoch", None),
            current_epoch=state.epoch if state is not None else None,
        ),
    )
