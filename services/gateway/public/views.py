"""Read-model records → the public JSON shapes. Times are RFC 3339 UTC strings."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from spotreel.services.gateway.deps import Claim
from spotreel.readmodel.jobs import AttemptView, HistoryEntry, JobListItem, JobView
from spotreel.readmodel.webhooks import PENDING, JobWebhookState

# The status a job has between the 202 and the scheduler's first event reaching the read model.
ACCEPTED = "accepted"
TERMINAL = frozenset({"succeeded", "failed", "cancelled", "dead_lettered"})


def iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def progress(job: JobView) -> dict[str, Any]:
    out: dict[str, Any] = {"percent": round(job.progress_pct, 2), "phase": job.phase or "pending",
                           "step": job.step, "total_steps": job.total_steps, "resuming": job.resuming}
    if job.resuming:
        # The high-water mark stays visible; the worker is redoing work from an older checkpoint.
        start = job.resume_from_pct or 0.0
        out["resume_from_percent"] = round(start, 2)
        out["current_percent"] = round(job.reported_pct, 2)
        out["message"] = f"resuming from checkpoint at {start:.0f}%"
    return out


def job_json(job: JobView) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": job.job_id, "status": job.status, "model": job.model, "pool": job.pool, "priority": job.priority,
        "prompt": job.prompt, "params": job.params, "created_at": iso(job.created_at_ms),
        "updated_at": iso(job.updated_at_ms), "run_at": iso(job.run_at_ms), "progress": progress(job),
        "attempt": {"failures": job.attempt, "max_attempts": job.max_attempts, "preemptions": job.preemptions,
                    "lease_epoch": job.lease_epoch},
        "cancel_requested": job.cancel_requested, "pause_requested": job.pause_requested,
        "error": job.error, "terminal_reason": job.terminal_reason, "version": job.version,
    }
    body["limits"] = limits_json(job.params, job.max_attempts)
    if job.status == "succeeded" and job.result_key:
        body["result"] = {"content_url": f"/v1/videos/{job.job_id}/content", "sha256": job.result_sha256,
                          "size_bytes": job.result_size_bytes}
    return body


def limits_json(params: dict[str, Any], max_attempts: int | None) -> dict[str, Any]:
    """The job's retry and time policy (POST /v1/videos fields), from the read model's params; null where the
    row predates a field."""
    def seconds(name: str) -> int | None:
        ms = params.get(name)
        return ms // 1000 if isinstance(ms, int) else None
    return {"timeout_seconds": seconds("timeout_ms"), "max_attempts": max_attempts or None,
            "backoff_base_seconds": seconds("backoff_base_ms"), "backoff_max_seconds": seconds("backoff_max_ms"),
            "stuck_steps": params.get("stuck_steps"), "stuck_min_seconds": seconds("stuck_min_ms")}


def webhook_json(callback_url: Any, state: JobWebhookState | None) -> dict[str, Any] | None:
    """What became of the job's webhooks: null without a callback_url; `pending` until the notifier has
    an outcome (nothing due yet, or it has not read the job); else the newest notification's outcome:
    `retrying`, `delivered`, `failed` (the receiver refused it), `gave_up` (attempts used up), `refused`
    (the address may not be called) or `no_secret` (the tenant has no signing secret)."""
    if not callback_url:
        return None
    if state is None:
        return {"state": PENDING, "attempts": 0, "last_error": None, "last_status": None, "event_id": None,
                "event_type": None, "updated_at": None}
    updated = None
    if state.updated_at is not None:
        updated = iso(int(state.updated_at.replace(tzinfo=state.updated_at.tzinfo or timezone.utc).timestamp()
                          * 1000))
    return {"state": state.state, "attempts": state.attempts, "last_error": state.last_error,
            "last_status": state.last_status, "event_id": state.event_id, "event_type": state.event_type,
            "updated_at": updated}


def claim_json(c: Claim) -> dict[str, Any]:
    """A job known only from the gateway's claim: accepted, not yet seen by the scheduler's projection."""
    return {"id": c.job_id, "status": ACCEPTED, "model": c.model, "pool": c.pool, "priority": c.priority,
            "prompt": c.prompt, "params": c.params, "created_at": iso(c.accepted_at_ms),
            "updated_at": iso(c.accepted_at_ms), "run_at": None,
            "progress": {"percent": 0.0, "phase": "pending", "step": 0, "total_steps": 0, "resuming": False},
            "attempt": {"failures": 0, "max_attempts": None, "preemptions": 0, "lease_epoch": None},
            "cancel_requested": False, "pause_requested": False, "error": None, "terminal_reason": None,
            "version": 0}


def list_item_json(item: JobListItem) -> dict[str, Any]:
    return {"id": item.job_id, "status": item.status, "priority": item.priority, "prompt": item.prompt,
            "created_at": iso(item.created_at_ms), "updated_at": iso(item.updated_at_ms)}


def event_json(e: HistoryEntry) -> dict[str, Any]:
    return {"version": e.version, "type": e.event_type, "occurred_at": iso(e.occurred_at_ms),
            "summary": e.summary, "rejected": e.rejected}


def attempt_json(a: AttemptView) -> dict[str, Any]:
    return {"lease_epoch": a.lease_epoch, "worker_id": a.worker_id, "status": a.status,
            "started_at": iso(a.started_at_ms), "ended_at": iso(a.ended_at_ms), "start_step": a.start_step,
            "last_step": a.last_step, "reason": a.reason}
