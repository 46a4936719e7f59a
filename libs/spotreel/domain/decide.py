"""decide(state, command, now_ms) -> events: the only place a job command is judged.

A refusal is a CommandRejected event, never an exception, and never changes state. The returned events
are numbered after `state.version` and share `at_ms = now_ms` and `causation_id = command.command_id`.

Order of judgement:
1. SubmitJob is handled first because it is the only command valid for an unknown job, and because a
   repeated submission must stay a no-op even after the job finished (the caller gets the same job).
2. Any other command for an unknown job: unknown_job.
3. Terminal states absorb: everything but RequeueJob of a failed/dead-lettered job is refused (terminal).
   A job evicted from the scheduler's table after its retention (retention.py) answers first of all: a
   repeated submission is still a no-op, WatchParent gets its outcome, the rest is refused (evicted).
4. The command's own rules (this module for lifecycle, timers and DAG; leases.py for leases).
"""

from __future__ import annotations

import math
from typing import Any

from spotreel.domain import commands as cmd
from spotreel.domain import events as ev
from spotreel.domain import dag, ids, leases, limits, retention
from spotreel.domain.outcomes import Head, Reason, number, rejected
from spotreel.domain.records import replace
from spotreel.domain.state import JobState, Status

Events = tuple[Any, ...]


def decide(state: JobState | None, command: object, now_ms: int, sent_ms: int | None = None) -> Events:
    """The events `command` causes on `state` at `now_ms`. `sent_ms`: when the holder sent a lease command,
    where a trusted path tells it (a gateway's intake headers, within the scheduler's gateway hold): the
    lease's expiry is judged at it (never later than `now_ms`); a renewal still counts from `now_ms`."""
    if not isinstance(command, cmd.JOB_COMMANDS):
        return rejected(state, command, now_ms, Reason.UNKNOWN_COMMAND)
    h = Head(command.job_id, now_ms, command.command_id)
    if isinstance(command, cmd.EraseJob) and state is not None:
        return number(state, _erase(state, command, h, now_ms))
    if state is not None and state.evicted:
        # A finished job's summary (retention.py): idempotency and its outcome for late children only.
        return number(state, retention.decide_evicted(state, command, h, now_ms))
    if isinstance(command, cmd.SubmitJob):
        return number(state, _submit(state, command, h, now_ms))
    if state is None:
        # For WatchParent the detail names the child, so the owner can answer it (parent unknown).
        detail = command.child_id if isinstance(command, cmd.WatchParent) else ""
        return rejected(state, command, now_ms, Reason.UNKNOWN_JOB, detail)
    if isinstance(command, cmd.WatchParent):
        # Accepted in every state: a terminal parent must still tell a child that asks late.
        return number(state, (h.event(ev.ParentWatched, child_id=command.child_id, status=state.status),))
    if state.is_terminal and not (isinstance(command, cmd.RequeueJob) and state.status in Status.REQUEUEABLE):
        return rejected(state, command, now_ms, Reason.TERMINAL, f"job is {state.status}")
    return number(state, _route(state, command, h, now_ms, sent_ms))


def _route(state: JobState, c: Any, h: Head, now_ms: int,  # noqa: C901 - a flat dispatch
           sent_ms: int | None = None) -> Events:
    match c:
        case cmd.GrantLease():
            return leases.grant(state, c, h, now_ms)
        case cmd.ExpireLease():
            return leases.expire(state, c, h, now_ms)
        case cmd.PreemptLease():
            return leases.preempt(state, c, h, now_ms)
        case cmd.RenewLease() | cmd.ReportProgress() | cmd.RecordCheckpoint() | cmd.CompleteJob():
            return leases.worker_command(state, c, h, now_ms, sent_ms)
        case cmd.FailJob() | cmd.ReleaseLease():
            return leases.worker_command(state, c, h, now_ms, sent_ms)
        case cmd.CancelJob():
            return _cancel(state, c, h, now_ms)
        case cmd.PauseJob():
            return _pause(state, c, h, now_ms)
        case cmd.ResumeJob():
            return _resume(state, c, h, now_ms)
        case cmd.Reprioritize():
            if c.priority == state.priority:
                return rejected(state, c, now_ms, Reason.PRIORITY_UNCHANGED)
            return (h.event(ev.JobReprioritized, priority=c.priority, previous_priority=state.priority),)
        case cmd.RequeueJob():
            if state.status not in Status.REQUEUEABLE:
                return rejected(state, c, now_ms, Reason.NOT_REQUEUEABLE, f"job is {state.status}")
            return (h.event(ev.JobRequeued, reason=c.reason, budget_reset=True),)
        case cmd.ActivateJob():
            if state.status != Status.SCHEDULED:
                return rejected(state, c, now_ms, Reason.NOT_SCHEDULED, f"job is {state.status}")
            if state.run_at_ms is not None and now_ms < state.run_at_ms:
                return rejected(state, c, now_ms, Reason.NOT_DUE, f"due at {state.run_at_ms}")
            return (h.event(ev.JobQueued, reason="due"),)
    return _resolve_parent(state, c, h, now_ms)


# --- submission ------------------------------------------------------------------------------------------

_DAG_POLICIES = frozenset(p.value for p in dag.DagPolicy)


def submission_problem(c: cmd.SubmitJob) -> str | None:
    policy = limits.policy_problem(
        max_attempts=c.max_attempts, backoff_base_ms=c.backoff_base_ms, backoff_max_ms=c.backoff_max_ms,
        timeout_ms=c.timeout_ms, stuck_steps=c.stuck_steps, stuck_min_ms=c.stuck_min_ms)
    spec = c.spec
    render = limits.render_problem(guidance_scale=spec.guidance_scale, negative_prompt=spec.negative_prompt,
                                   sampler=spec.sampler, input_image=spec.input_image)
    checks = (
        (bool(c.tenant) and bool(c.idempotency_key), "tenant and idempotency_key are required"),
        ("\x00" not in c.tenant + c.idempotency_key, "tenant and idempotency_key must not contain NUL"),
        (bool(spec.model) and bool(c.gpu_type), "model and gpu_type are required"),
        (spec.num_steps >= 1 and spec.fps >= 1, "num_steps and fps must be >= 1"),
        (math.isfinite(spec.duration_s) and spec.duration_s > 0, "duration_s must be > 0"),
        (c.run_at_ms is None or 0 <= c.run_at_ms <= limits.MAX_TIME_MS,
         f"run_at_ms must be from 0 to {limits.MAX_TIME_MS} (the end of year 9999)"),
        (c.max_attempts >= 1 and c.max_preemptions >= 1, "max_attempts and max_preemptions must be >= 1"),
        (c.keep_checkpoints >= 1, "keep_checkpoints must be >= 1"),
        (0 <= c.backoff_base_ms <= c.backoff_max_ms, "need 0 <= backoff_base_ms <= backoff_max_ms"),
        # The retry and time policy's limits (limits.py), each naming its field.
        (policy is None, policy or ""),
        (render is None, render or ""),
        (c.poison_threshold >= 2 and c.poison_window_ms >= 0, "poison_threshold >= 2, poison_window_ms >= 0"),
        (c.dag_policy in _DAG_POLICIES, f"dag_policy must be one of {sorted(_DAG_POLICIES)}"),
        (all(c.parents) and len(set(c.parents)) == len(c.parents), "parents must be distinct ids"),
        # A job cannot depend on itself; cycles across jobs are refused where a DAG is submitted as a whole.
        (c.job_id not in c.parents, "dag_cycle: a job cannot be its own parent"),
    )
    return next((why for ok, why in checks if not ok), None)


def _submit(state: JobState | None, c: cmd.SubmitJob, h: Head, now_ms: int) -> Events:
    if state is not None:
        if state.request_hash == c.request_hash and state.idempotency_key == c.idempotency_key:
            return ()
        return rejected(state, c, now_ms, Reason.IDEMPOTENCY_KEY_REUSED, "same key, different request")
    if c.job_id != ids.job_id_for(c.tenant, c.idempotency_key):
        return rejected(state, c, now_ms, Reason.JOB_ID_MISMATCH, "job_id must be ids.job_id_for(tenant, key)")
    why = submission_problem(c)
    if why is not None:
        return rejected(state, c, now_ms, Reason.INVALID_REQUEST, why)
    submitted = h.event(
        ev.JobSubmitted,
        tenant=c.tenant,
        idempotency_key=c.idempotency_key,
        request_hash=c.request_hash,
        gpu_type=c.gpu_type,
        pool=ids.pool_key(c.spec.model, c.gpu_type),
        spec=replace(c.spec, duration_s=float(c.spec.duration_s)),
        priority=c.priority,
        callback_url=c.callback_url,
        run_at_ms=c.run_at_ms,
        parents=tuple(c.parents),
        dag_policy=c.dag_policy,
        max_attempts=c.max_attempts,
        max_preemptions=c.max_preemptions,
        keep_checkpoints=c.keep_checkpoints,
        backoff_base_ms=c.backoff_base_ms,
        backoff_max_ms=c.backoff_max_ms,
        poison_threshold=c.poison_threshold,
        poison_window_ms=c.poison_window_ms,
        schedule_id=c.schedule_id,
        occurrence_ms=c.occurrence_ms,
        timeout_ms=c.timeout_ms,
        stuck_steps=c.stuck_steps,
        stuck_min_ms=c.stuck_min_ms,
    )
    if c.parents:
        return submitted, h.event(ev.JobWaiting, pending_parents=tuple(c.parents))
    return submitted, _runnable_or_scheduled(c.run_at_ms, h, now_ms, "submitted")


def _runnable_or_scheduled(run_at_ms: int | None, h: Head, now_ms: int, reason: str) -> Any:
    if run_at_ms is not None and run_at_ms > now_ms:
        return h.event(ev.JobScheduled, run_at_ms=run_at_ms, reason="run_at")
    return h.event(ev.JobQueued, reason=reason)


# --- cancel / pause / resume ------------------------------------------------------------------------------


def _cancel(state: JobState, c: cmd.CancelJob, h: Head, now_ms: int) -> Events:
    if state.status in Status.IDLE or state.status == Status.PAUSED:
        return (h.event(ev.JobCancelled, reason=c.reason),)
    if state.cancel_requested:
        return rejected(state, c, now_ms, Reason.CANCEL_REQUESTED, "cancel already requested")
    # Leased or running: only the lease holder (or the lease's expiry) can confirm that work stopped.
    return (h.event(ev.CancelRequested, reason=c.reason, epoch=state.epoch),)


def _erase(state: JobState, c: cmd.EraseJob, h: Head, now_ms: int) -> Events:
    """Cancel a live job first (reason "erased"; a leased one's holder is told as for any cancel), then
    JobErased. A repeated erase records again: erasing is never refused for a job the table knows."""
    cancel: Events = ()
    if not (state.evicted or state.is_terminal or state.cancel_requested):
        cancel = _cancel(state, cmd.CancelJob(c.command_id, c.job_id, reason="erased"), h, now_ms)
    return (*cancel, h.event(ev.JobErased, by=c.by, reason=c.reason))


def _pause(state: JobState, c: cmd.PauseJob, h: Head, now_ms: int) -> Events:
    if state.status == Status.PAUSED:
        return rejected(state, c, now_ms, Reason.ALREADY_PAUSED)
    if state.status in Status.IDLE:
        return (h.event(ev.JobPaused, reason=c.reason),)
    if state.cancel_requested:
        return rejected(state, c, now_ms, Reason.CANCEL_REQUESTED, "cancel already requested")
    if state.pause_requested:
        return rejected(state, c, now_ms, Reason.PAUSE_REQUESTED, "pause already requested")
    # A leased job keeps running until its worker checkpoints and releases (or the lease expires); a
    # completion that races the pause is still accepted, since a pause, unlike a cancel, wants the result.
    return (h.event(ev.PauseRequested, reason=c.reason, epoch=state.epoch),)


def _resume(state: JobState, c: cmd.ResumeJob, h: Head, now_ms: int) -> Events:
    if state.status in Status.HOLDING_LEASE and state.pause_requested:
        return (h.event(ev.JobResumed, status=state.status),)
    if state.status != Status.PAUSED:
        return rejected(state, c, now_ms, Reason.NOT_PAUSED, f"job is {state.status}")
    if state.pending_parents:
        target = Status.WAITING
    elif state.run_at_ms is not None and state.run_at_ms > now_ms:
        target = Status.SCHEDULED
    else:
        target = Status.QUEUED
    return (h.event(ev.JobResumed, status=target),)


# --- DAG --------------------------------------------------------------------------------------------------


def _resolve_parent(state: JobState, c: cmd.ResolveParent, h: Head, now_ms: int) -> Events:
    """The policies are dag.readiness's. fail_fast: the first parent that did not succeed cancels the
    child (reason parent_failed). continue: a parent's failure is recorded and the child runs once every
    parent is terminal, whatever the outcomes (they stay readable in state.parent_outcomes)."""
    if c.parent_id not in state.parents:
        return rejected(state, c, now_ms, Reason.NOT_A_PARENT, c.parent_id)
    if c.parent_id not in state.pending_parents:
        return rejected(state, c, now_ms, Reason.PARENT_ALREADY_RESOLVED, c.parent_id)
    if c.outcome not in Status.TERMINAL:
        return rejected(state, c, now_ms, Reason.INVALID_REQUEST, f"outcome must be one of {sorted(Status.TERMINAL)}")
    resolved = h.event(ev.ParentResolved, parent_id=c.parent_id, outcome=c.outcome)
    outcomes = {p: dag.Outcome(o) for p, o in (*state.parent_outcomes, (c.parent_id, c.outcome))}
    # decide only ever records a valid policy; the fallback keeps decide total on hand-made states.
    policy = state.dag_policy if state.dag_policy in _DAG_POLICIES else dag.DagPolicy.FAIL_FAST
    verdict = dag.readiness(state.parents, outcomes, policy)
    if verdict.action is dag.Action.CANCEL:
        return resolved, h.event(ev.JobCancelled, reason="parent_failed")
    if verdict.action is dag.Action.RUN and state.status == Status.WAITING:
        return resolved, _runnable_or_scheduled(state.run_at_ms, h, now_ms, "parents_resolved")
    # Still waiting for other parents, or paused: ResumeJob works out where the job goes.
    return (resolved,)
