"""A job's rows from its folded state: jobs_by_id (only the columns an event changed, each at that event's
version), jobs_by_tenant, and the live rows pool_jobs and tenant_live_jobs (written when the job's status changes,
deleted once the job ends).
projection.py calls `state_ops` for every job event; the consumer's rebuild calls `full_state_ops`."""

from __future__ import annotations

import json
from typing import Any

from spotreel.domain import limits
from spotreel.domain.state import JobState, Status
from spotreel.services.projector.rows import JOBS, POOL_JOBS, TENANT_JOBS, TENANT_LIVE, RowOp, Values


# The JobState fields behind jobs_by_id.params. Only JobSubmitted sets them, so a state evolved from another
# holds the very same objects and the JSON of its predecessor's row can be reused.
PARAM_FIELDS = ("spec", "gpu_type", "callback_url", "parents", "dag_policy", "keep_checkpoints", "backoff_base_ms",
                "backoff_max_ms", "poison_threshold", "poison_window_ms", "occurrence_ms", "timeout_ms", "stuck_steps",
                "stuck_min_ms")


def params_json(s: JobState) -> str:
    v = s.spec
    params = {
        "duration_s": v.duration_s, "resolution": v.resolution, "fps": v.fps, "seed": v.seed,
        "num_steps": v.num_steps, "gpu_type": s.gpu_type, "callback_url": s.callback_url,
        "parents": list(s.parents), "dag_policy": s.dag_policy, "keep_checkpoints": s.keep_checkpoints,
        "backoff_base_ms": s.backoff_base_ms, "backoff_max_ms": s.backoff_max_ms,
        "poison_threshold": s.poison_threshold, "poison_window_ms": s.poison_window_ms,
        "occurrence_ms": s.occurrence_ms, "timeout_ms": s.timeout_ms, "stuck_steps": s.stuck_steps,
        "stuck_min_ms": s.stuck_min_ms,
    }
    # The render options and the input image's reference only where the job has them (null: the model's
    # default; text-to-video), so the rows of jobs submitted before they existed read as before.
    for name in ("guidance_scale", "negative_prompt", "sampler", "input_image"):
        if getattr(v, name) is not None:
            params[name] = getattr(v, name)
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


def _same_params(a: JobState, b: JobState) -> bool:
    for name in PARAM_FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        if x is not y and x != y:
            return False
    return True


def _readable(ms: int | None) -> int | None:
    """A time the read model's drivers can decode: a run_at past limits.MAX_TIME_MS (the end of year 9999; only
    in records written before the API and the domain refused one) is stored as that limit, since a later CQL
    timestamp makes the Python driver drop its connection on read."""
    return None if ms is None else min(ms, limits.MAX_TIME_MS)


def job_row(s: JobState, prev: tuple[JobState, dict[str, Any]] | None = None) -> dict[str, Any]:
    """jobs_by_id columns (key excluded) of a folded state. `prev`: a state and its row, whose params JSON is
    reused when the state's parameters are the same (they are, unless one of them is a JobSubmitted)."""
    cp = s.resume_point
    params = prev[1]["params"] if prev is not None and _same_params(prev[0], s) else params_json(s)
    return {
        "tenant_id": s.tenant, "status": s.status, "pool": s.pool, "model": s.spec.model, "priority": s.priority,
        "prompt": s.spec.prompt, "params": params, "idempotency_key": s.idempotency_key,
        "created_at": s.submitted_at_ms, "updated_at": s.updated_at_ms, "run_at": _readable(s.run_at_ms),
        "attempt": s.attempts_used, "max_attempts": s.max_attempts,
        "lease_epoch": s.epoch or None, "worker_id": s.lease.worker_id if s.lease else None,
        "lease_expires_at": s.lease.expires_at_ms if s.lease else None,
        "step": s.step, "total_steps": s.spec.num_steps, "resuming": s.resuming,
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
    return {"status": s.status, "priority": s.priority, "prompt": s.spec.prompt, "updated_at": s.updated_at_ms,
            "version": s.version}


def pool_row(s: JobState) -> dict[str, Any] | None:
    """The live row of pool_jobs and tenant_live_jobs; None: the job is not live (terminal), so the row is
    deleted. Status only: its readers (pool stats, the gateway's in-flight guard) read nothing else, and the
    cell's write time is the version that set it. With the version in the row too, every progress report and
    heartbeat of a running job would rewrite both rows, each in a pool's or tenant's one partition; so a row
    is written when the job's status changes, and the tables' `version` column is not written (migration 0010)."""
    return None if s.status in Status.TERMINAL else {"status": s.status}


def _diff(before: dict[str, Any] | None, after: dict[str, Any]) -> Values:
    """The columns of `after` whose value is not the one in `before`, in column order.

    Both rows come from the same builder (job_row, tenant_row, pool_row: one dict literal each), so they
    hold the same columns in the same order and are compared pairwise, by identity first: a state evolved
    from another shares every object an event did not change (rows of different lengths are an error, not a
    quiet wrong diff). That is about half the cost of a set difference of their items (a tuple made and
    hashed per column of both rows), whose tuples also set off young collections."""
    if before is None:
        return tuple(after.items())
    return tuple(kv for kv, b in zip(after.items(), before.values(), strict=True) if b is not kv[1] and b != kv[1])


Rows = tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]


def state_rows(s: JobState, prev: tuple[JobState, Rows] | None = None) -> Rows:
    """(jobs_by_id, jobs_by_tenant, pool_jobs) columns of a state; `prev` as in job_row."""
    return job_row(s, (prev[0], prev[1][0]) if prev is not None else None), tenant_row(s), pool_row(s)


def state_ops(before: JobState | None, after: JobState, rows: tuple[Rows | None, Rows] | None = None) -> list[RowOp]:
    """The job-row writes that take `before` to `after` (all of `after` when before is None). `rows`: the
    state_rows of before and after when the caller has them."""
    if rows is None:
        was_rows = state_rows(before) if before is not None else None
        rows = was_rows, state_rows(after, (before, was_rows) if was_rows is not None else None)
    was_rows, now_rows = rows
    ts = after.version
    ops = [RowOp(JOBS, (("job_id", after.job_id),), _diff(was_rows[0] if was_rows else None, now_rows[0]), ts)]
    tkey = (("tenant_id", after.tenant), ("created_at", after.submitted_at_ms), ("job_id", after.job_id))
    ops.append(RowOp(TENANT_JOBS, tkey, _diff(was_rows[1] if was_rows else None, now_rows[1]), ts))
    was, now = (was_rows[2] if was_rows else None), now_rows[2]
    # pool_jobs and tenant_live_jobs: the same live row (its status), keyed by pool and by tenant.
    for table, key in ((POOL_JOBS, (("pool", after.pool), ("job_id", after.job_id))),
                       (TENANT_LIVE, (("tenant_id", after.tenant), ("job_id", after.job_id)))):
        if now is None:
            if was_rows is None or was is not None:
                ops.append(RowOp(table, key, (), ts, delete=True))
        else:
            ops.append(RowOp(table, key, _diff(was, now), ts))
    return [op for op in ops if op.values or op.delete]


def full_state_ops(s: JobState) -> list[RowOp]:
    return state_ops(None, s)
