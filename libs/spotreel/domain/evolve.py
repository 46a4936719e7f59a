"""evolve(state, event) -> state, and fold.

evolve trusts the event completely: it never validates, never reads a clock and never raises for an event
out of place (it ignores what it cannot apply), so replaying any recorded history always succeeds. Every
judgement (is the epoch current, which checkpoints fall out of the window, how many preemptions) was made
by `decide` and written into the event.
"""

from __future__ import annotations

from collections.abc import Iterable
from spotreel.domain.records import replace

from spotreel.domain import events as ev
from spotreel.domain import leases, limits, progress
from spotreel.domain.retry import counts_toward_poison, failures_in_window
from spotreel.domain.spec import PERSONAL_SPEC_FIELDS
from spotreel.domain.state import Checkpoint, JobState, Lease, Status


def _submitted(e: ev.JobSubmitted) -> JobState:
    return JobState(
        job_id=e.job_id,
        version=e.version,
        status=Status.SUBMITTED,
        submitted_at_ms=e.at_ms,
        updated_at_ms=e.at_ms,
        tenant=e.tenant,
        idempotency_key=e.idempotency_key,
        request_hash=e.request_hash,
        gpu_type=e.gpu_type,
        pool=e.pool,
        spec=e.spec,
        priority=e.priority,
        callback_url=e.callback_url,
        parents=e.parents,
        dag_policy=e.dag_policy,
        max_attempts=e.max_attempts,
        max_preemptions=e.max_preemptions,
        keep_checkpoints=e.keep_checkpoints,
        backoff_base_ms=e.backoff_base_ms,
        backoff_max_ms=e.backoff_max_ms,
        poison_threshold=e.poison_threshold,
        poison_window_ms=e.poison_window_ms,
        schedule_id=e.schedule_id,
        occurrence_ms=e.occurrence_ms,
        timeout_ms=e.timeout_ms,
        stuck_steps=e.stuck_steps,
        stuck_min_ms=e.stuck_min_ms,
        run_at_ms=e.run_at_ms,
        pending_parents=e.parents,
    )


def erased_state(s: JobState) -> JobState:
    """The state with its personal fields emptied (spec.PERSONAL_SPEC_FIELDS, callback_url)."""
    return replace(s, spec=replace(s.spec, **{name: ("" if name == "prompt" else None)
                                              for name in PERSONAL_SPEC_FIELDS}), callback_url=None)


def _ended(s: JobState) -> JobState:
    """A terminal state holds no lease and no pending request."""
    was_leased = s.lease is not None or s.resuming
    s = replace(s, lease=None, cancel_requested=False, pause_requested=False)
    return progress.on_lease_end(s) if was_leased else s


def _with_expiry(s: JobState, expires_at_ms: int) -> JobState:
    """A renewal or a progress report: the lease runs longer, and its holder evidently has it."""
    return s if s.lease is None else replace(s, lease=replace(s.lease, expires_at_ms=expires_at_ms, confirmed=True))


def _confirmed(s: JobState) -> JobState:
    return s if s.lease is None or s.lease.confirmed else replace(s, lease=replace(s.lease, confirmed=True))


def _stepped(s: JobState, step: int, at_ms: int, phase: str | None = None) -> JobState:
    """The stuck rule's mark (limits.py): a higher step is an advance; a finishing phase turns the rule off."""
    if phase in limits.FINISHING_PHASES:
        return s if s.step_mark is None else replace(s, step_mark=None)
    if s.step_mark is not None and step > s.step_mark[0]:
        return replace(s, step_mark=(step, at_ms))
    return s


def _lease_over(before: JobState, after: JobState, e: object) -> JobState:
    """The event ended the lease: its rendering time joins the sum (an unclaimed lease ran nothing)."""
    lease = before.lease
    assert lease is not None
    used = 0 if isinstance(e, ev.LeaseReleased) and e.reason == leases.UNCLAIMED else \
        max(0, e.at_ms - lease.granted_at_ms)  # type: ignore[attr-defined]
    yielded = isinstance(e, ev.LeaseReleased) and e.reason == leases.PREEMPTED_FOR
    # Work after the lease's newest checkpoint is lost unless the lease delivered the result.
    kept = max([lease.granted_at_ms, *(c.at_ms for c in before.checkpoints if c.epoch == lease.epoch)])
    wasted = 0 if used == 0 or isinstance(e, ev.JobSucceeded) else max(0, e.at_ms - kept)  # type: ignore[attr-defined]
    return replace(after, render_ms=after.render_ms + used, wasted_ms=after.wasted_ms + min(used, wasted),
                   step_mark=None, step_origin=0, preempt_requested=False, preempted_last=yielded)


def _apply(s: JobState, e: object) -> JobState:  # noqa: C901 - one flat dispatch reads best here
    match e:
        case ev.JobScheduled():
            return replace(s, status=Status.SCHEDULED, run_at_ms=e.run_at_ms)
        case ev.JobWaiting():
            return replace(s, status=Status.WAITING, pending_parents=e.pending_parents)
        case ev.JobQueued():
            return replace(s, status=Status.QUEUED)
        case ev.JobRequeued(budget_reset=True):
            return replace(
                s,
                status=Status.QUEUED,
                lease=None,
                attempts_used=0,
                preemptions=0,
                recent_failures_ms=(),
                render_ms=0,
                terminal_reason=None,
                cancel_requested=False,
                cancel_reason=None,
                pause_requested=False,
                pause_reason=None,
            )
        case ev.JobRequeued():
            return replace(s, status=Status.QUEUED, lease=None)
        case ev.CancelRequested():
            return replace(s, cancel_requested=True, cancel_reason=e.reason, pause_requested=False)
        case ev.JobCancelled():
            return _ended(replace(s, status=Status.CANCELLED, terminal_reason=e.reason))
        case ev.JobErased():
            # What the table keeps of an erased job holds no sealed field either (erased_state).
            return erased_state(s)
        case ev.PauseRequested():
            return replace(s, pause_requested=True, pause_reason=e.reason)
        case ev.PreemptRequested():
            return replace(s, preempt_requested=True)
        case ev.JobPaused():
            return replace(s, status=Status.PAUSED, lease=None, pause_requested=False, pause_reason=e.reason)
        case ev.JobResumed():
            return replace(s, status=e.status, pause_requested=False, pause_reason=None)
        case ev.JobReprioritized():
            return replace(s, priority=e.priority)
        case ev.ParentResolved():
            return replace(
                s,
                pending_parents=tuple(p for p in s.pending_parents if p != e.parent_id),
                parent_outcomes=(*s.parent_outcomes, (e.parent_id, e.outcome)),
            )
        case ev.ParentWatched():
            return replace(s, watchers=s.watchers if e.child_id in s.watchers else (*s.watchers, e.child_id))
        case ev.JobLeased():
            lease = Lease(e.epoch, e.worker_id, e.pool, e.at_ms, e.lease_ttl_ms, e.lease_expires_at_ms,
                          fingerprint=e.worker_fingerprint, resume_step=e.resume_step)
            start = e.resume_step if e.resume_step is not None else 0
            leased = replace(s, status=Status.LEASED, epoch=max(s.epoch, e.epoch), lease=lease, attempt=e.attempt,
                             step_origin=start, step_mark=(start, e.at_ms))
            return progress.on_lease(leased, e.resume_progress_pct, e.resume_step)
        case ev.LeaseRenewed():
            return _with_expiry(s, e.lease_expires_at_ms)
        case ev.ProgressReported():
            running = _stepped(replace(_with_expiry(s, e.lease_expires_at_ms), status=Status.RUNNING), e.step,
                               e.at_ms, e.phase)
            return progress.on_report(running, e.progress_pct, e.step, e.phase)
        case ev.CheckpointRecorded():
            cp = Checkpoint(e.checkpoint_key, e.step, e.progress_pct, e.epoch, e.checksum, e.size_bytes, e.at_ms,
                            e.fingerprint)
            kept = tuple(c for c in s.checkpoints if c.key not in e.pruned_keys)
            # In step order: a lease that resumed behind a checkpoint made elsewhere records below it.
            at = sum(1 for c in kept if c.step < cp.step)
            ordered = (*kept[:at], cp, *kept[at:])
            return progress.on_report(_stepped(_confirmed(replace(s, checkpoints=ordered)), e.step, e.at_ms),
                                      e.progress_pct, e.step, s.phase)
        case ev.LeaseReleased(reason=leases.UNCLAIMED):
            return progress.on_unclaimed(replace(s, lease=None, preemptions=e.preemptions))
        case ev.LeaseExpired() | ev.LeaseReleased():
            return progress.on_lease_end(replace(s, lease=None, preemptions=e.preemptions))
        case ev.AttemptFailed():
            recent = failures_in_window(s.recent_failures_ms, e.at_ms, s.poison_window_ms)
            if counts_toward_poison(e.error_code):
                recent = (*recent, e.at_ms)
            failed = replace(
                s,
                lease=None,
                attempts_used=e.attempts_used,
                recent_failures_ms=recent,
                last_error_code=e.error_code,
                last_error_message=e.error_message,
                checkpoints=tuple(c for c in s.checkpoints if c.key != e.invalid_checkpoint_key),
            )
            return progress.on_lease_end(failed)
        case ev.JobSucceeded():
            done = replace(
                s,
                status=Status.SUCCEEDED,
                artifact_key=e.artifact_key,
                artifact_checksum=e.artifact_checksum,
                artifact_size_bytes=e.artifact_size_bytes,
            )
            return progress.on_success(_ended(done))
        case ev.JobFailed():
            return _ended(replace(s, status=Status.FAILED, terminal_reason=e.reason))
        case ev.JobDeadLettered():
            return _ended(replace(s, status=Status.DEAD_LETTERED, terminal_reason=e.reason))
    return s


def evolve(state: JobState | None, event: object) -> JobState | None:
    if isinstance(event, ev.JobSubmitted):
        return _submitted(event)
    if state is None or isinstance(event, ev.CommandRejected):
        return state
    applied = _apply(state, event)
    if applied is state:
        return state
    if state.lease is not None and applied.lease is None:
        applied = _lease_over(state, applied, event)
    return replace(applied, version=event.version, updated_at_ms=event.at_ms)  # type: ignore[attr-defined]


def fold(events: Iterable[object], state: JobState | None = None) -> JobState | None:
    for event in events:
        state = evolve(state, event)
    return state
