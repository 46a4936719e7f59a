"""Which events become webhooks, and the JSON each one carries.

The body depends only on the event (never on when it is sent), so a re-delivery is byte-identical and
receivers can dedupe on `id` (= the Spotreel-Event-Id header): `<job_id>.v<version>`, unique per event
because versions are per job and never reused. Progress milestones are the exception: their id is
`<job_id>.progress-<N>` (N = 25, 50, 75), so a milestone crossed again (a resumed run redoing steps, or a
notifier re-reading after a restart) is the same notification, sent once.

A job chooses what it hears with `webhook_events` (POST /v1/videos): `started` (each lease: the job went to a
worker, `video.started`), `progress` (25/50/75 % milestones, `video.progress`), `completed`
(`video.succeeded`) and `failed` (every other end: `video.failed`, `video.cancelled`,
`video.dead_lettered`). Without it: completed and failed, the terminal states only.

A job created through the OpenAI-compatible surface (its subscription's style `openai`) gets OpenAI's
payload instead (`openai_style`): `{"id", "object": "event", "created_at", "type": "video.completed" |
"video.failed", "data": {"id"}}`, for its ends only (that API has no started or progress events).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from spotreel.domain import events as ev

# The kinds a job may ask for (FILTERS) and the default live in libs/spotreel/webhooks/filters.py.
MILESTONES = (25, 50, 75)

TERMINAL_TYPES: dict[type, tuple[str, str]] = {
    ev.JobSucceeded: ("video.succeeded", "succeeded"),
    ev.JobFailed: ("video.failed", "failed"),
    ev.JobCancelled: ("video.cancelled", "cancelled"),
    ev.JobDeadLettered: ("video.dead_lettered", "dead_lettered"),
}


@dataclass(frozen=True)
class Notification:
    event_id: str
    event_type: str
    job_id: str
    body: bytes
    version: int = 0
    # Which of FILTERS it belongs to; a job's subscription decides whether it is sent.
    kind: str = "completed"
    # Progress: the milestone (percent) it announces; the notifier sends each one once per job.
    milestone: int | None = None


def event_id(job_id: str, version: int) -> str:
    return f"{job_id}.v{version}"


def milestone(progress_pct: float) -> int | None:
    """The highest milestone reached at `progress_pct`, or None below the first."""
    reached = [m for m in MILESTONES if progress_pct >= m]
    return reached[-1] if reached else None


def _data(event: Any, status: str, gateway_url: str) -> dict[str, Any]:
    data: dict[str, Any] = {"job_id": event.job_id, "status": status, "version": event.version}
    if isinstance(event, ev.JobSucceeded):
        # The API's own URL (it needs the tenant's key and answers with a short-lived presigned link), so
        # a webhook body never carries a credential that outlives the request.
        data.update(content_url=f"{gateway_url}/v1/videos/{event.job_id}/content",
                    sha256=event.artifact_checksum, size_bytes=event.artifact_size_bytes)
    elif isinstance(event, ev.JobFailed):
        data.update(reason=event.reason, error_code=event.error_code)
    elif isinstance(event, (ev.JobCancelled, ev.JobDeadLettered)):
        data.update(reason=event.reason)
    return data


def _encode(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


OPENAI_STYLE = "openai"


def openai_style(note: Notification) -> Notification | None:
    """The same notification in the OpenAI Videos API's event shape (same id, so a re-delivery is still the
    same event); None for a kind that API has no event for."""
    if note.kind not in ("completed", "failed") or note.milestone is not None:
        return None
    doc = json.loads(note.body)
    kind = "video.completed" if note.event_type == "video.succeeded" else "video.failed"
    body = {"id": note.event_id, "object": "event", "created_at": doc["occurred_at_ms"] // 1000, "type": kind,
            "data": {"id": note.job_id}}
    return Notification(note.event_id, kind, note.job_id, _encode(body), note.version, note.kind)


def notification_for(event: Any, gateway_url: str) -> Notification | None:
    if isinstance(event, ev.JobLeased):
        eid = event_id(event.job_id, event.version)
        data = {"job_id": event.job_id, "status": "leased", "version": event.version, "attempt": event.attempt,
                "resume_step": event.resume_step}
        doc = {"id": eid, "type": "video.started", "occurred_at_ms": event.at_ms, "data": data}
        return Notification(eid, "video.started", event.job_id, _encode(doc), event.version, "started")
    if isinstance(event, ev.ProgressReported):
        m = milestone(event.progress_pct)
        if m is None:
            return None
        eid = f"{event.job_id}.progress-{m}"
        data = {"job_id": event.job_id, "status": "running", "version": event.version, "milestone_percent": m,
                "progress_percent": round(event.progress_pct, 2), "step": event.step}
        doc = {"id": eid, "type": "video.progress", "occurred_at_ms": event.at_ms, "data": data}
        return Notification(eid, "video.progress", event.job_id, _encode(doc), event.version, "progress", m)
    kind = TERMINAL_TYPES.get(type(event))
    if kind is None:
        return None
    event_type, status = kind
    eid = event_id(event.job_id, event.version)
    doc = {"id": eid, "type": event_type, "occurred_at_ms": event.at_ms, "data": _data(event, status, gateway_url)}
    return Notification(eid, event_type, event.job_id, _encode(doc), event.version,
                        "completed" if status == "succeeded" else "failed")
