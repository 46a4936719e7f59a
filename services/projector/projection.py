"""The pure projection: events in, row writes out. No I/O, so every rule here is unit-tested.

Idempotency and order-safety come from Cassandra's cell timestamps, not from reads:

- Every job-scoped write (jobs_by_id, jobs_by_tenant, events_by_job, attempts_by_job, pool_jobs,
  rejections_by_job) is `USING TIMESTAMP <event version>`. Cassandra keeps, per cell, the write with the
  highest timestamp, so a replayed event rewrites identical cells at an identical timestamp (no change),
  and an older event arriving late loses to the newer cells already there. No LWT (a Paxos round per
  write, four round trips) and no read-before-write are needed. `IF version < ?` would also be correct
  but an order of magnitude slower, and cannot express "some columns newer, some older".
- The price: only the projector may write these tables (a write without USING TIMESTAMP would carry
  "now" in microseconds and win forever), and a DELETE's tombstone must not be purged (gc_grace) before
  a replay of the events it shadows; a full rebuild replays in order, so it re-deletes anyway.
- workers rows are keyed by worker, across jobs, so the job version cannot order them. They use the
  owner's clock: at_ms * 1000 + version (capped), which also compares sensibly with the gateway's
  own (now-stamped) writes of the same row.

jobs_by_id is the fold: the projector keeps each job's `JobState` (rebuilt from events_by_job after a
restart) and writes only the columns an event changed, each at that event's version. The newest write
of each cell is then the cell's value in the folded state, whatever order the writes land in.

CommandRejected takes no version slot, so it goes to rejections_by_job keyed by (version judged
against, command_id): deterministic, so replays overwrite, and distinct rejections never collide.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

from spotreel.domain import events as ev
from spotreel.domain.evolve import evolve
from spotreel.domain.state import JobState, Status

Key = tuple[tuple[str, Any], ...]
Values = tuple[tuple[str, Any], ...]

JOBS = "jobs_by_id"
TENANT_JOBS = "jobs_by_tenant"
EVENTS = "events_by_job"
REJECTIONS = "rejections_by_job"
ATTEMPTS = "attempts_by_job"
POOL_JOBS = "pool_jobs"
WORKERS = "workers"

# Tables whose rows belong to one job: ops in a contiguous batch of that job's events may be merged.
JOB_SCOPED = frozenset({JOBS, TENANT_JOBS, EVENTS, REJECTIONS, ATTEMPTS, POOL_JOBS})


@dataclass(frozen=True)
class RowOp:
    """One write: set `values` on the row `key` of `table` at `timestamp`, or delete the row."""

    table: str
    key: Key
    values: Values
    timestamp: int
    delete: bool = False

    @property
    def row_id(self) -> tuple[str, Key]:
        return self.table, self.key


@dataclass(frozen=True)
class Envelope:
    """What the projector knows about a record besides the decoded event."""

    payload: bytes = b""
    schema_name: str = ""


# ---------------------------------------------------------------------------------------------------------
# Rows from state
# ---------------------------------------------------------------------------------------------------------


def params_json(s: JobState) -> str:
    params = {
        "duration_s": s.duration_s, "resolution": s.resolution, "fps": s.fps, "seed": s.seed,
        "num_steps": s.num_steps, "gpu_type": s.gpu_type, "callback_url": s.callback_url,
        "parents": list(s.parents), "dag_policy": s.dag_policy, "keep_checkpoints": s.keep_checkpoints,
        "backoff_base_ms": s.backoff_base_ms, "backoff_max_ms": s.backoff_max_ms,
        "poison_threshold": s.poison_threshold, "poison_window_ms": s.poison_window_ms,
        "occurrence_ms": s.occurrence_ms,
    }
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


def job_row(s: JobState) -> dict[str, Any]:
    """jobs_by_id columns (key excluded) of a folded state."""
    cp = s.resume_point
    return {
        "tenant_id": s.tenant, "status": s.status, "pool": s.pool, "model": s.model, "priority": s.priority,
        "prompt": s.prompt, "params": params_json(s), "idempotency_key": s.idempotency_key,
        "created_at": s.submitted_at_ms, "updated_at": s.updated_at_ms, "run_at": s.run_at_ms,
        "attempt": s.attempts_used, "max_attempts": s.max_attempts,
        "lease_epoch": s.epoch or None, "worker_id": s.lease.worker_id if s.lease else None,
        "lease_expires_at": s.lease.expires_at_ms if s.lease else None,
        "step": s.step, "total_steps": s.num_steps, "resuming": s.resuming,
        "checkpoint_key": cp.key if cp else None,
        "result_key": s.artifact_key, "result_sha256": s.artifact_checksum,
        "result_size_bytes": s.artifact_size_bytes,
        "error": f"{s.last_error_code}: {s.last_error_message}" if s.last_error_code else None,
        "progress_pct": s.progress_pct, "reported_pct": s.reported_pct, "phase": s.phase,
        "resume_from_pct": s.resume_from_pct, "preemptions": s.preemptions,
        "max_preemptions": s.max_preemptions, "cancel_requested": s.cancel_requested,
        "pause_requested": s.pause_requested, "terminal_reason": s.terminal_reason,
        "schedule_id": s.schedule_id, "version": s.version,
    }


def tenant_row(s: JobState) -> dict[str, Any]:
    return {"status": s.status, "priority": s.priority, "prompt": s.prompt, "updated_at": s.updated_at_ms,
            "version": s.version}


def pool_row(s: JobState) -> dict[str, Any] | None:
    """None: the job is not live in its pool (terminal), so the row is deleted."""
    return None if s.status in Status.TERMINAL else {"status": s.status, "version": s.version}


def _diff(before: dict[str, Any] | None, after: dict[str, Any]) -> Values:
    if before is None:
        return tuple(after.items())
    return tuple((k, v) for k, v in after.items() if before.get(k, _MISSING) != v)


_MISSING = object()


def state_ops(before: JobState | None, after: JobState) -> list[RowOp]:
    """The job-row writes that take `before` to `after` (all of `after` when before is None)."""
    ts = after.version
    ops = [RowOp(JOBS, (("job_id", after.job_id),),
                 _diff(job_row(before) if before else None, job_row(after)), ts)]
    tkey = (("tenant_id", after.tenant), ("created_at", after.submitted_at_ms), ("job_id", after.job_id))
    ops.append(RowOp(TENANT_JOBS, tkey, _diff(tenant_row(before) if before else None, tenant_row(after)), ts))
    pkey = (("pool", after.pool), ("job_id", after.job_id))
    was, now = (pool_row(before) if before else None), pool_row(after)
    if now is None:
        if before is None or was is not None:
            ops.append(RowOp(POOL_JOBS, pkey, (), ts, delete=True))
    else:
        ops.append(RowOp(POOL_JOBS, pkey, _diff(was, now), ts))
    return [op for op in ops if op.values or op.delete]


def full_state_ops(s: JobState) -> list[RowOp]:
    return state_ops(None, s)


# ---------------------------------------------------------------------------------------------------------
# Event-local rows: history, attempts, workers
# ---------------------------------------------------------------------------------------------------------

_HEADER = ("job_id", "version", "at_ms", "causation_id")
_QUIET = frozenset({"prompt", "request_hash", "idempotency_key", "checksum", "artifact_checksum",
                    "error_message", "pruned_keys", "resume_checkpoint_key", "checkpoint_key", "artifact_key",
                    "parents", "callback_url"})


def summary(event: Any) -> str:
    """One line for the history API: the event type and its salient fields."""
    parts = []
    for f in fields(event):
        if f.name in _HEADER or f.name in _QUIET:
            continue
        value = getattr(event, f.name)
        if value is None or value == () or f.name.startswith(("backoff_", "poison_", "max_", "keep_")):
            continue
        parts.append(f"{f.name}={value}")
    line = f"{type(event).__name__}" + (f" {' '.join(parts)}" if parts else "")
    return line if len(line) <= 240 else line[:237] + "..."


def event_ops(event: Any, env: Envelope) -> list[RowOp]:
    return [RowOp(EVENTS, (("job_id", event.job_id), ("version", event.version)), (
        ("event_id", f"{event.job_id}/{event.version}"),
        ("event_type", type(event).__name__),
        ("occurred_at", event.at_ms),
        ("schema_name", env.schema_name),
        ("payload", env.payload),
        ("summary", summary(event)),
    ), event.version)]


def rejection_ops(e: ev.CommandRejected, env: Envelope) -> list[RowOp]:
    key = (("job_id", e.job_id), ("version", e.version), ("command_id", e.command_id))
    return [RowOp(REJECTIONS, key, (
        ("command_type", e.command_type), ("reason", e.reason), ("detail", e.detail),
        ("occurred_at", e.at_ms), ("epoch_given", e.epoch_given), ("current_epoch", e.current_epoch),
        ("payload", env.payload),
    ), e.version)]


def _ended_status(event: Any, before: JobState | None) -> tuple[str, str | None]:
    cancelling = before is not None and before.cancel_requested
    match event:
        case ev.LeaseExpired():
            return ("cancelled" if cancelling else "lost"), "lease_expired"
        case ev.LeaseReleased():
            return ("cancelled" if cancelling else "released"), event.reason
        case ev.AttemptFailed():
            return ("cancelled" if cancelling else "failed"), event.error_code
    return "succeeded", None


def attempt_ops(event: Any, before: JobState | None) -> list[RowOp]:
    def op(epoch: int, **values: Any) -> list[RowOp]:
        values["version"] = event.version
        return [RowOp(ATTEMPTS, (("job_id", event.job_id), ("lease_epoch", epoch)), tuple(values.items()),
                      event.version)]

    match event:
        case ev.JobLeased():
            start = event.resume_step or 0
            return op(event.epoch, worker_id=event.worker_id, pool=event.pool, status="leased",
                      started_at=event.at_ms, start_step=start, last_step=start)
        case ev.ProgressReported():
            return op(event.epoch, status="running", last_step=event.step)
        case ev.CheckpointRecorded():
            return op(event.epoch, last_step=event.step)
        case ev.LeaseExpired() | ev.LeaseReleased() | ev.AttemptFailed() | ev.JobSucceeded():
            status, reason = _ended_status(event, before)
            return op(event.epoch, status=status, ended_at=event.at_ms, reason=reason)
    return []


def worker_timestamp(event: Any) -> int:
    return event.at_ms * 1000 + min(event.version, 999)


def lease_timestamp(granted_at_ms: int, ended: bool) -> int:
    """The write time of a worker's status: ordered by the lease it concerns, not by when the event was stamped.

    A worker holds one lease at a time and asks for the next only after it finished the last, so its leases
    are granted in the order it ran them. Their end events are not stamped in that order: a completion whose
    verdict was slow (the worker moved on with a pending answer) can be judged on its job's partition after
    the next lease was granted on another. Stamped by the end's own time, that late "idle" would overwrite
    "busy" on the newer lease, and a capacity manager would drain a busy worker. Stamped by the lease it ends
    (just after that lease's "busy"), it can only overwrite its own lease's status.

    At the top of the lease's millisecond (998, 999), so a row written before this ordering (stamped
    at_ms * 1000 + version) still gives way: the end of a lease granted then wins over its old "busy", and a
    new "busy" (granted after the old end's millisecond) wins over that end."""
    return granted_at_ms * 1000 + (999 if ended else 998)


def worker_ops(event: Any, before: JobState | None) -> list[RowOp]:
    lease = before.lease if before is not None else None
    holder = lease.worker_id if lease is not None else None

    def op(worker: str | None, ts: int, **values: Any) -> list[RowOp]:
        if not worker:
            return []
        return [RowOp(WORKERS, (("worker_id", worker),), tuple(values.items()), ts)]

    def seen(worker: str | None) -> list[RowOp]:
        return op(worker, worker_timestamp(event), last_seen_at=event.at_ms)

    def ended(worker: str | None, status: str) -> list[RowOp]:
        ts = lease_timestamp(lease.granted_at_ms, True) if lease is not None else worker_timestamp(event)
        return op(worker, ts, status=status, current_job_id=None, current_epoch=None)

    match event:
        case ev.JobLeased():
            return op(event.worker_id, lease_timestamp(event.at_ms, False), pool=event.pool, status="busy",
                      current_job_id=event.job_id, current_epoch=event.epoch) + seen(event.worker_id)
        case ev.LeaseRenewed() | ev.ProgressReported() | ev.CheckpointRecorded():
            return seen(holder)
        case ev.LeaseExpired():
            # Missed its heartbeats: presumed gone until it is leased work again.
            return ended(event.worker_id, "gone")
        case ev.LeaseReleased() | ev.AttemptFailed():
            return ended(event.worker_id, "idle") + seen(event.worker_id)
        case ev.JobSucceeded():
            return ended(holder, "idle") + seen(holder)
    return []


# ---------------------------------------------------------------------------------------------------------
# One event
# ---------------------------------------------------------------------------------------------------------


def is_job_event(event: Any) -> bool:
    return isinstance(event, ev.JOB_EVENTS)


def project(state: JobState | None, event: Any, env: Envelope = Envelope()) -> tuple[JobState | None, list[RowOp]]:
    """(state after, writes) for one event of the job whose folded state is `state`.

    An event at or below the state's version was applied already (a replay, or a redelivery after a
    crash): its history row is rewritten (identical), nothing else."""
    if not is_job_event(event):
        return state, []
    if isinstance(event, ev.CommandRejected):
        return state, rejection_ops(event, env)
    ops = event_ops(event, env)
    if state is not None and event.version <= state.version:
        return state, ops
    after = evolve(state, event)
    ops += attempt_ops(event, state) + worker_ops(event, state)
    if after is not None and after is not state:
        ops += state_ops(state, after)
    return after, ops


# ---------------------------------------------------------------------------------------------------------
# Batching
# ---------------------------------------------------------------------------------------------------------


def coalesce(ops: list[RowOp]) -> list[RowOp]:
    """Fewer writes with the same outcome, for ops of one batch of contiguous events.

    Per job-scoped row: the newest delete shadows everything at or below it; the writes above it merge
    into one at the highest timestamp, each column keeping its newest value. Safe because a batch holds
    every version of a job between its first and last event, so no write from outside the batch has a
    timestamp between a merged column's own and the merged one. workers rows (cross-job) are left alone.
    """
    groups: dict[tuple[str, Key], list[RowOp]] = {}
    out: list[RowOp] = []
    for op in ops:
        if op.table in JOB_SCOPED:
            groups.setdefault(op.row_id, []).append(op)
        else:
            out.append(op)
    for (table, key), group in groups.items():
        group = sorted(group, key=lambda o: (o.timestamp, not o.delete))
        deletes = [o for o in group if o.delete]
        floor = deletes[-1].timestamp if deletes else None
        if deletes:
            out.append(deletes[-1])
        live = [o for o in group if not o.delete and (floor is None or o.timestamp > floor)]
        if live:
            merged: dict[str, Any] = {}
            for o in live:
                merged.update(o.values)
            out.append(RowOp(table, key, tuple(merged.items()), live[-1].timestamp))
    return out
