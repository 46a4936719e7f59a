"""The per-job webhook state row (`webhook_state_by_job`) as both services read it: the notifier writes it
(services/webhooks/store.py) and the gateway shows it in `GET /v1/videos/{id}` as `webhook`. One reader in
the shared library, so the two cannot drift on the row and neither service imports the other."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

DELIVERED = "delivered"
FINAL = frozenset({DELIVERED, "failed", "gave_up", "refused", "no_secret"})
# A subscribed job whose notifications have not been tried yet (none due, or the notifier is behind).
PENDING = "pending"
JOB_STATE_CQL = ("SELECT event_id, event_type, state, attempts, last_status, last_error, updated_at "
                 "FROM webhook_state_by_job WHERE job_id = ?")


@dataclass(frozen=True)
class JobWebhookState:
    state: str
    attempts: int
    last_status: int | None
    last_error: str | None
    event_id: str | None
    event_type: str | None
    updated_at: datetime | None


def job_state_from_row(row) -> JobWebhookState | None:
    if row is None:
        return None
    return JobWebhookState(row.state or PENDING, row.attempts or 0, row.last_status, row.last_error, row.event_id,
                           row.event_type, row.updated_at)
