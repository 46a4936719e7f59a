"""Which events become webhooks, and the JSON each one carries.

The body depends only on the event (never on when it is sent), so a re-delivery is byte-identical and
receivers can dedupe on `id` (= the Spotreel-Event-Id header): `<job_id>.v<version>`, unique per event
because versions are per job and never reused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from spotreel.domain import events as ev

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


def event_id(job_id: str, version: int) -> str:
    return f"{job_id}.v{version}"


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


def notification_for(event: Any, gateway_url: str) -> Notification | None:
    kind = TERMINAL_TYPES.get(type(event))
    if kind is None:
        return None
    event_type, status = kind
    eid = event_id(event.job_id, event.version)
    doc = {"id": eid, "type": event_type, "occurred_at_ms": event.at_ms, "data": _data(event, status, gateway_url)}
    return Notification(eid, event_type, event.job_id, json.dumps(doc, sort_keys=True, separators=(",", ":")).encode(),
                        event.version)
