"""Cassandra side of the notifier: subscriptions (job → callback URL), tenant secrets, delivery outcomes.

The driver is synchronous; the async notifier calls these through `asyncio.to_thread`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from cassandra.cluster import Session

DELIVERED = "delivered"
FINAL = frozenset({DELIVERED, "failed", "gave_up", "refused", "no_secret"})


@dataclass(frozen=True)
class Subscription:
    job_id: str
    tenant_id: str
    callback_url: str


@dataclass(frozen=True)
class Outcome:
    status: str
    attempts: int
    last_status: int | None
    last_error: str | None


class WebhookStore:
    def __init__(self, session: Session) -> None:
        self.session = session
        p = session.prepare
        self._subscribe = p("INSERT INTO webhook_subscriptions (job_id, tenant_id, callback_url) VALUES (?, ?, ?)")
        self._subscription = p("SELECT tenant_id, callback_url FROM webhook_subscriptions WHERE job_id = ?")
        self._secret = p("SELECT webhook_secret FROM tenants WHERE tenant_id = ?")
        self._outcome = p("SELECT status, attempts, last_status, last_error FROM webhook_deliveries "
                          "WHERE event_id = ?")
        self._record = p("INSERT INTO webhook_deliveries (event_id, job_id, tenant_id, url, event_type, status, "
                         "attempts, last_status, last_error, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")

    def subscribe(self, sub: Subscription) -> None:
        self.session.execute(self._subscribe, (sub.job_id, sub.tenant_id, sub.callback_url))

    def subscription(self, job_id: str) -> Subscription | None:
        row = self.session.execute(self._subscription, (job_id,)).one()
        return None if row is None else Subscription(job_id, row.tenant_id, row.callback_url)

    def secret(self, tenant_id: str) -> str | None:
        row = self.session.execute(self._secret, (tenant_id,)).one()
        return None if row is None else row.webhook_secret

    def outcome(self, event_id: str) -> Outcome | None:
        row = self.session.execute(self._outcome, (event_id,)).one()
        return None if row is None else Outcome(row.status, row.attempts or 0, row.last_status, row.last_error)

    def record(self, event_id: str, sub: Subscription, event_type: str, outcome: Outcome) -> None:
        self.session.execute(self._record, (
            event_id, sub.job_id, sub.tenant_id, sub.callback_url, event_type, outcome.status, outcome.attempts,
            outcome.last_status, (outcome.last_error or "")[:1000] or None, datetime.now(timezone.utc)))
