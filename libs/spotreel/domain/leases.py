"""Decisions about leases: granting one, and every command a worker sends under one.

Fencing (DESIGN §2.2): a lease's epoch is the job's highest epoch + 1, so epochs strictly increase and are
never reused. A worker command is accepted only if its epoch is the current lease's, its worker_id is the
holder's and the time it is judged at (`now_ms`) has not passed the lease's expiry. Everything else is
a CommandRejected that changes nothing. A lease past its expiry is dead even before the ExpireLease timer
is processed; the timer then requeues the job.

Which time judges a command (`judged_at`): a lease holder's command, and the ExpireLease timer, are judged
at the moment they entered the commands log (the broker's append time: the platform's clock, never the
worker's), not at the moment the owner got to them. The log is in append order, so when an ExpireLease
stamped after the deadline is judged, every renewal stamped before the deadline has already been applied:
a control plane that falls behind delays the verdicts, it never turns a renewal sent in time into an
expiry (DESIGN invariant 8). A grant is judged at the owner's clock: its TTL starts when it is made.

The lease timer (ExpireLease) names the epoch it was armed for. Renewals push the expiry out, so a timer
that fires before the current expiry is refused with lease_not_expired and the owner re-arms from state.

A lease that was granted but never reached its worker (the gateway's long-poll had ended when the answer
came, and the worker did not poll again in time) is handed back by the gateway with ReleaseLease reason
UNCLAIMED. Nothing ran under it, so it is neither a failure nor a preemption: the job is requeued at once
with its budgets untouched. Only a lease nobody has acted on can go that way; once its holder renewed,
reported or checkpointed (`Lease.confirmed`) the release is refused with lease_in_use.
"""

from __future__ import annotations

from typing import Any

from spotreel.domain import commands as cmd
from spotreel.domain import events as ev
from spotreel.domain import limits, resume_match, retry
from spotreel.domain.outcomes import Head, Reason, rejected
from spotreel.domain.progress import valid_pct
from spotreel.domain.state import JobState, Status

Events = tuple[Any, ...]

# ReleaseLease.reason of a lease handed back because it never reached a worker.
UNCLAIMED = "unclaimed"
# LeaseReleased / JobRequeued reason of a lease handed back because the scheduler asked for it
# (PreemptLease: higher-tier work waits in the pool, preemption.py).
PREEMPTED_FOR = "preempted_for"
# PreemptLease.reason of a lease asked back for a tenant far below its fair share (preemption.py): no tier
# check; its release is recorded as PREEMPTED_FOR all the same.
FAIR_SHARE = "fair_share"


# Commands whose validity depends on when they were sent rather than on when they were read.
SENT_TIMED = (cmd.RenewLease, cmd.ReportProgress, cmd.RecordCheckpoint, cmd.CompleteJob, cmd.FailJob,
              cmd.ReleaseLease, cmd.ExpireLease)


def judged_at(command: object, now_ms: int, appended_ms: int | None) -> int:
    """The time `decide` judges `command` at: its log append time for the lease commands above, the owner's
    clock for everything else. Never later than `now_ms` (an append time from a clock ahead of the owner's
    is not trusted to be in the future), and the owner's clock when the log gave no append time."""
    if appended_ms is None or not isinstance(command, SENT_TIMED):
        return now_ms
    return min(now_ms, appended_ms)


def renew_in_s(verdict_wait_s: float | None, lease_ttl_ms: int, *, slow_s: float = 1.0) -> float | None:
    """How long a lease holder should wait before its next renewal (heartbeat or progress), given how long the
    control plane took to judge its last one (None: no verdict in time). None: keep the usual cadence.

    A slow verdict means the control plane is behind; more traffic would only make it slower (a metastable
    spiral). Since a renewal counts from when it entered the log, a holder can space its renewals out to a
    third of a TTL, counted from when it sent the last one: two more renewals still fit before the deadline,
    each of which may take another third to get through. (Counted from the answer, or at half a TTL, a
    gateway that queues requests for many seconds would push renewals past the deadline.)"""
    if verdict_wait_s is not None and verdict_wait_s < slow_s:
        return None
    return lease_ttl_ms / 3000.0


def quiet_s(renew_in_s: float, lease_ttl_ms: int) -> float:
    """How long a holder stays quiet after a pacing hint: the hint, but never more than a third of its own
    lease's TTL. The one who paces (a gateway, a transport) may not know the TTL this lease was granted with
    (a worker may ask for a shorter one than the gateway's default); the holder always does."""
    return min(renew_in_s, lease_ttl_ms / 3000.0) if lease_ttl_ms > 0 else renew_in_s


def _fence(state: JobState, epoch: int) -> str | None:
    if epoch > state.epoch:
        return Reason.UNKNOWN_EPOCH
    if epoch < state.epoch or state.lease is None:
        return Reason.STALE_EPOCH
    return None


def _worker_fence(state: JobState, c: Any, now_ms: int) -> str | None:
    reason = _fence(state, c.epoch)
    if reason is not None:
        return reason
    assert state.lease is not None
    if c.worker_id != state.lease.worker_id:
        return Reason.WORKER_MISMATCH
    if now_ms >= state.lease.expires_at_ms:
        return Reason.LEASE_EXPIRED
    return None


def grant(state: JobState, c: cmd.GrantLease, h: Head, now_ms: int) -> Events:
    if state.status != Status.QUEUED:
        return rejected(state, c, now_ms, Reason.NOT_QUEUED, f"status is {state.status}")
    if c.pool != state.pool:
        return rejected(state, c, now_ms, Reason.POOL_MISMATCH, f"job runs in {state.pool}")
    if not limits.lease_ttl_fits(c.lease_ttl_ms, now_ms) or not c.worker_id:
        return rejected(state, c, now_ms, Reason.INVALID_REQUEST,
                        "lease_ttl_ms must be > 0 and end the lease by the end of year 9999, and worker_id set")
    choice = resume_match.choose_resume(state.checkpoints, c.worker_fingerprint)
    resume = choice.checkpoint
    return (
        h.event(
            ev.JobLeased,
            worker_id=c.worker_id,
            pool=c.pool,
            epoch=state.epoch + 1,
            attempt=state.attempt + 1,
            lease_ttl_ms=c.lease_ttl_ms,
            lease_expires_at_ms=now_ms + c.lease_ttl_ms,
            resume_checkpoint_key=resume.key if resume else None,
            resume_step=resume.step if resume else None,
            resume_progress_pct=resume.progress_pct if resume else None,
            why_priority=c.why_priority, why_overdue=c.why_overdue, why_waited_ms=c.why_waited_ms,
            why_share=c.why_share, why_next_share=c.why_next_share, why_weight=c.why_weight,
            why_warm=c.why_warm, why_candidates=c.why_candidates,
            # Without a fingerprint nothing was matched: the newest, as before fingerprints (no reason).
            worker_fingerprint=c.worker_fingerprint, resume_reason=choice.reason if c.worker_fingerprint else None,
            resume_skipped_keys=tuple(cp.key for cp in choice.skipped),
            resume_detail=choice.detail(c.worker_fingerprint),
        ),
    )


def _asks(state: JobState) -> dict[str, bool]:
    """What the lease holder is asked to do, told on each renewal so it needs no other source."""
    return {"cancel_requested": state.cancel_requested,
            "drain_requested": state.pause_requested or state.preempt_requested}


def worker_command(state: JobState, c: Any, h: Head, now_ms: int, sent_ms: int | None = None) -> Events:
    # Expired or not is judged at the send time where one is told (decide.py); the renewal counts from now.
    reason = _worker_fence(state, c, now_ms if sent_ms is None else min(now_ms, sent_ms))
    if reason is not None:
        return rejected(state, c, now_ms, reason)
    assert state.lease is not None
    # Never shortened: after a rebalance the new owner's clock may be a little behind the old one's.
    renewed_until = max(state.lease.expires_at_ms, now_ms + state.lease.ttl_ms)
    match c:
        case cmd.RenewLease():
            return (h.event(ev.LeaseRenewed, epoch=c.epoch, lease_expires_at_ms=renewed_until, **_asks(state)),)
        case cmd.ReportProgress():
            if not valid_pct(c.progress_pct) or c.step < 0:
                return rejected(state, c, now_ms, Reason.INVALID_PROGRESS, "progress_pct in 0..100, step >= 0")
            return (
                h.event(
                    ev.ProgressReported,
                    epoch=c.epoch,
                    step=c.step,
                    progress_pct=float(c.progress_pct),
                    phase=c.phase,
                    lease_expires_at_ms=renewed_until,
                    **_asks(state),
                ),
            )
        case cmd.RecordCheckpoint():
            return _checkpoint(state, c, h, now_ms)
        case cmd.CompleteJob():
            if state.cancel_requested:
                return rejected(state, c, now_ms, Reason.CANCEL_REQUESTED, "the job was cancelled while running")
            return (
                h.event(
                    ev.JobSucceeded,
                    epoch=c.epoch,
                    artifact_key=c.artifact_key,
                    artifact_checksum=c.artifact_checksum,
                    artifact_size_bytes=c.artifact_size_bytes,
                ),
            )
        case cmd.FailJob():
            return _fail(state, c, h, now_ms)
        case cmd.ReleaseLease(reason=reason) if reason == UNCLAIMED:
            if state.lease.confirmed:
                return rejected(state, c, now_ms, Reason.LEASE_IN_USE,
                                "its holder has acted on this lease; only an unused lease is unclaimed")
            return lease_ended(state, c, h, now_ms, released=True, preemption=False)
    # ReleaseLease: the only worker command left.
    return lease_ended(state, c, h, now_ms, released=True)


def preempt(state: JobState, c: cmd.PreemptLease, h: Head, now_ms: int) -> Events:
    """Ask the holder to checkpoint and release for waiting work of a higher tier (or, reason `fair_share`,
    for a tenant far below its fair share: no tier check). The holder learns it on its
    next renewal (`drain_requested`, as for a pause); its release requeues the job at once, costing neither
    an attempt nor its preemption budget (`lease_ended`). A completion that races it is still accepted."""
    reason = _fence(state, c.epoch)
    if reason is not None:
        return rejected(state, c, now_ms, reason)
    assert state.lease is not None
    if now_ms >= state.lease.expires_at_ms:
        return rejected(state, c, now_ms, Reason.LEASE_EXPIRED)
    for asked, why in ((state.cancel_requested, Reason.CANCEL_REQUESTED), (state.pause_requested, Reason.PAUSE_REQUESTED),
                       (state.preempt_requested, Reason.PREEMPT_REQUESTED)):
        if asked:
            return rejected(state, c, now_ms, why, f"{why.replace('_', ' ')} already")
    if c.reason != FAIR_SHARE and state.priority >= c.for_priority:
        return rejected(state, c, now_ms, Reason.NOT_LOWER_TIER,
                        f"priority {state.priority} is not below the waiting {c.for_priority}")
    return (h.event(ev.PreemptRequested, reason=c.reason, epoch=state.epoch, for_priority=c.for_priority),)


def expire(state: JobState, c: cmd.ExpireLease, h: Head, now_ms: int) -> Events:
    reason = _fence(state, c.epoch)
    if reason is not None:
        return rejected(state, c, now_ms, reason)
    assert state.lease is not None
    if c.rule != limits.Rule.TTL:
        return enforce(state, c, h, now_ms)
    if now_ms < state.lease.expires_at_ms:
        return rejected(state, c, now_ms, Reason.LEASE_NOT_EXPIRED, f"expires at {state.lease.expires_at_ms}")
    return lease_ended(state, c, h, now_ms, released=False)


def enforce(state: JobState, c: cmd.ExpireLease, h: Head, now_ms: int) -> Events:
    """The timeout and stuck timers (limits.py), on the live lease (the caller fenced the epoch)."""
    assert state.lease is not None
    if c.rule == limits.Rule.TIMEOUT:
        due = limits.timeout_at(state)
    elif c.rule == limits.Rule.STUCK:
        due = limits.stuck_at(state)
    else:
        return rejected(state, c, now_ms, Reason.INVALID_REQUEST, f"rule must be one of {sorted(limits.Rule.ALL)}")
    if due is None or now_ms < due:
        return rejected(state, c, now_ms, Reason.NOT_DUE, f"{c.rule} not reached" + (f": due at {due}" if due else ""))
    holder = state.lease.worker_id
    if c.rule == limits.Rule.STUCK:
        mark = state.step_mark or (state.step_origin, state.lease.granted_at_ms)
        why = (f"no step advance for {now_ms - mark[1]} ms after step {mark[0]} (limit {limits.stuck_after_ms(state)} ms, "
               f"stuck_steps {state.stuck_steps} x {limits.expected_step_ms(state) or 0:.0f} ms per step, "
               f"at least {state.stuck_min_ms} ms)")
        # Exactly what the holder's own FailJob(stuck) would do: a retryable, visible failure.
        return _fail(state, cmd.FailJob(c.command_id, state.job_id, c.epoch, holder, limits.Rule.STUCK, why), h, now_ms)
    used = limits.render_ms_at(state, now_ms)
    why = f"rendering took {used} ms across attempts; timeout_ms is {state.timeout_ms}"
    if state.cancel_requested:
        return _fail(state, cmd.FailJob(c.command_id, state.job_id, c.epoch, holder, limits.Rule.TIMEOUT, why, False),
                     h, now_ms)
    return (
        h.event(ev.AttemptFailed, epoch=c.epoch, worker_id=holder, error_code=limits.Rule.TIMEOUT, error_message=why,
                retryable=False, attempts_used=state.attempts_used + 1, invalid_checkpoint_key=None),
        h.event(ev.JobFailed, reason=limits.Rule.TIMEOUT, error_code=limits.Rule.TIMEOUT),
    )


def lease_ended(state: JobState, c: Any, h: Head, now_ms: int, *, released: bool, preemption: bool = True) -> Events:
    """A lease lost or handed back. It is a preemption unless it only confirms a requested cancel/pause, or
    never reached a worker (`preemption=False`, an unclaimed lease). A release that answers the scheduler's
    PreemptLease is not one either: the scheduler chose it (so it must not spend the job's budget), it is
    recorded with reason `preempted_for` whatever reason the worker gave (it drains as for a pause), and the
    job is requeued at once. A holder asked to yield that goes silent instead lost its lease as usual."""
    assert state.lease is not None
    yielded = released and preemption and state.preempt_requested
    confirming = state.cancel_requested or state.pause_requested or yielded
    preemptions = state.preemptions if confirming or not preemption else state.preemptions + 1
    ended: Any
    if released:
        ended = h.event(
            ev.LeaseReleased,
            epoch=state.lease.epoch,
            worker_id=state.lease.worker_id,
            reason=PREEMPTED_FOR if yielded and not (state.cancel_requested or state.pause_requested) else c.reason,
            preemptions=preemptions,
        )
    else:
        ended = h.event(
            ev.LeaseExpired, epoch=state.lease.epoch, worker_id=state.lease.worker_id, preemptions=preemptions
        )
    if state.cancel_requested:
        return ended, h.event(ev.JobCancelled, reason=state.cancel_reason or "user")
    if state.pause_requested:
        return ended, h.event(ev.JobPaused, reason=state.pause_reason or "user")
    if retry.preemptions_exhausted(preemptions, state.max_preemptions):
        return ended, h.event(
            ev.JobDeadLettered,
            reason=retry.DeadLetterReason.MAX_PREEMPTIONS,
            attempts_used=state.attempts_used,
            preemptions=preemptions,
        )
    reason = "lease_expired" if not released else ("released" if preemption else UNCLAIMED)
    return ended, h.event(ev.JobRequeued, reason=PREEMPTED_FOR if yielded else reason, budget_reset=False)


def _checkpoint(state: JobState, c: cmd.RecordCheckpoint, h: Head, now_ms: int) -> Events:
    if not c.checkpoint_key or c.step < 0 or c.size_bytes < 0 or not valid_pct(c.progress_pct):
        return rejected(state, c, now_ms, Reason.INVALID_REQUEST, "checkpoint_key, step, size or progress invalid")
    assert state.lease is not None
    # Beyond what this lease started from and its own checkpoints. A newer checkpoint made on another
    # environment that this lease skipped (resume_match.py) does not count: this lease's line goes on from
    # an older point, and both stay for the workers that can use them.
    floor = max([-1 if state.lease.resume_step is None else state.lease.resume_step,
                 *(cp.step for cp in state.checkpoints if cp.epoch == state.lease.epoch)])
    if c.step <= floor:
        return rejected(state, c, now_ms, Reason.CHECKPOINT_NOT_NEWER, f"this lease is already at step {floor}")
    if any(cp.key == c.checkpoint_key for cp in state.checkpoints):
        return rejected(state, c, now_ms, Reason.CHECKPOINT_NOT_NEWER, "checkpoint key already recorded")
    keep = max(1, state.keep_checkpoints)
    overflow = len(state.checkpoints) + 1 - keep
    pruned = tuple(cp.key for cp in state.checkpoints[: max(0, overflow)])  # the lowest steps
    return (
        h.event(
            ev.CheckpointRecorded,
            epoch=c.epoch,
            checkpoint_key=c.checkpoint_key,
            step=c.step,
            progress_pct=float(c.progress_pct),
            checksum=c.checksum,
            size_bytes=c.size_bytes,
            pruned_keys=pruned,
            duration_ms=c.duration_ms,
            fingerprint=c.fingerprint or state.lease.fingerprint,
        ),
    )


def _fail(state: JobState, c: cmd.FailJob, h: Head, now_ms: int) -> Events:
    known_bad = c.invalid_checkpoint_key if any(cp.key == c.invalid_checkpoint_key for cp in state.checkpoints) else None

    def failed(attempts_used: int) -> Any:
        return h.event(
            ev.AttemptFailed,
            epoch=c.epoch,
            worker_id=c.worker_id,
            error_code=c.error_code,
            error_message=c.error_message,
            retryable=c.retryable,
            attempts_used=attempts_used,
            invalid_checkpoint_key=known_bad,
        )

    if state.cancel_requested:
        # The worker stopped because we asked it to: confirms the cancel, costs no attempt.
        return failed(state.attempts_used), h.event(ev.JobCancelled, reason=state.cancel_reason or "user")
    d = retry.on_visible_failure(
        job_id=state.job_id,
        retryable=c.retryable,
        attempts_used=state.attempts_used,
        max_attempts=state.max_attempts,
        recent_failures_ms=state.recent_failures_ms,
        now_ms=now_ms,
        poison_threshold=state.poison_threshold,
        poison_window_ms=state.poison_window_ms,
        backoff_base_ms=state.backoff_base_ms,
        backoff_max_ms=state.backoff_max_ms,
        poison_evidence=retry.counts_toward_poison(c.error_code),
    )
    if d.outcome == retry.FailureOutcome.FAILED:
        return failed(d.attempts_used), h.event(ev.JobFailed, reason=d.reason or "non_retryable", error_code=c.error_code)
    if d.outcome == retry.FailureOutcome.DEAD_LETTER:
        return failed(d.attempts_used), h.event(
            ev.JobDeadLettered, reason=d.reason or "", attempts_used=d.attempts_used, preemptions=state.preemptions
        )
    out: Events = (
        failed(d.attempts_used),
        h.event(ev.JobScheduled, run_at_ms=now_ms + d.backoff_ms, reason="backoff"),
    )
    if state.pause_requested:
        out = (*out, h.event(ev.JobPaused, reason=state.pause_reason or "user"))
    return out
