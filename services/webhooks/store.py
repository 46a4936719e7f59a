"""Cassandra side of the notifier: subscriptions (job → callback URL), tenant secrets, delivery outcomes.

Outcomes go to two tables: `webhook_deliveries` per event (what a restarted notifier reads to skip what was
delivered) and `webhook_state_by_job` per job (what the gateway shows in `GET /v1/videos/{id}` as
`webhook`; its reader is libs/spotreel/readmodel/webhooks.py, shared by both services so they cannot drift
on the row).
The driver is synchronous; the async notifier calls these through `asyncio.to_thread`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from cassandra.cluster import Session

from spotreel.readmodel.webhooks import FINAL, JOB_STATE_CQL, PENDING, JobWebhookState, job_state_from_row


def state_timestamp(version: int, final: bool, attempts: int) -> int:
    """The write timestamp of a job's state row: a newer event beats an older one, a final outcome beats
    the attempts before it, a later attempt beats an earlier one (a notifier restarted mid-retry counts
    attempts from 1 again, so only the final flag decides against it). The subscription's `pending` row
    is written at 0 and loses to all of them."""
    return (version << 21) | (int(final) << 20) | min(max(attempts, 0), (1 << 20) - 1)


@dataclass(frozen=True)
class Subscription:
    job_id: str
    tenant_id: str
    callback_url: str
    # The job's webhook_events (payload.FILTERS), written by the gateway; None: payload.DEFAULT_FILTER.
    events: frozenset[str] | None = None
    # The payload's shape: None, spotreel's; "openai" for a job created through the OpenAI-compatible surface.
    style: str | None = None


@dataclass(frozen=True)
class DeliveryResult:
    status: str
    attempts: int
    last_status: int | None
    last_error: str | None


class WebhookStore:
    def __init__(self, session: Session) -> None:
        self.session = session
        p = session.prepare
        self._subscribe = p("INSERT INTO webhook_subscriptions (job_id, tenant_id, callback_url) VALUES (?, ?, ?)")
        self._subscription = p("SELECT tenant_id, callback_url, events, payload_style FROM webhook_subscriptions "
                               "WHERE job_id = ?")
        self._secret = p("SELECT webhook_secret, webhook_secret_previous, webhook_secret_previous_until FROM tenants "
                         "WHERE tenant_id = ?")
        self._outcome = p("SELECT status, attempts, last_status, last_error FROM webhook_deliveries "
                          "WHERE event_id = ?")
        self._record = p("INSERT INTO webhook_deliveries (event_id, job_id, tenant_id, url, event_type, status, "
                         "attempts, last_status, last_error, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
        self._pending = p("INSERT INTO webhook_state_by_job (job_id, state, attempts) VALUES (?, ?, 0) "
                          "USING TIMESTAMP 0")
        self._job_state = p("INSERT INTO webhook_state_by_job (job_id, event_id, event_type, state, attempts, "
                            "last_status, last_error, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?")
        self._read_job_state = p(JOB_STATE_CQL)

    def subscribe(self, sub: Subscription) -> None:
        self.session.execute(self._subscribe, (sub.job_id, sub.tenant_id, sub.callback_url))
        self.session.execute(self._pending, (sub.job_id, PENDING))

    def subscription(self, job_id: str) -> Subscription | None:
        row = self.session.execute(self._subscription, (job_id,)).one()
        if row is None or row.callback_url is None:
            return None  # none, or only the gateway's filter and the JobSubmitted not read yet
        return Subscription(job_id, row.tenant_id, row.callback_url,
                            frozenset(row.events) if row.events is not None else None, row.payload_style)

    def secret(self, tenant_id: str) -> tuple[str, ...] | None:
        """The secrets that sign the tenant's webhooks now, newest first: the current one, and a rotated one's
        predecessor until its window ends; None without a secret."""
        row = self.session.execute(self._secret, (tenant_id,)).one()
        if row is None or not row.webhook_secret:
            return None
        until = row.webhook_secret_previous_until
        if row.webhook_secret_previous and until is not None \
                and until.replace(tzinfo=until.tzinfo or timezone.utc) > datetime.now(timezone.utc):
            return row.webhook_secret, row.webhook_secret_previous
        return (row.webhook_secret,)

    def outcome(self, event_id: str) -> DeliveryResult | None:
        row = self.session.execute(self._outcome, (event_id,)).one()
        return None if row is None else DeliveryResult(row.status, row.attempts or 0, row.last_status, row.last_error)

    def job_state(self, job_id: str) -> JobWebhookState | None:
        return job_state_from_row(self.session.execute(self._read_job_state, (job_id,)).one())

    def record(self, event_id: str, sub: Subscription, event_type: str, outcome: DeliveryResult,
               version: int = 0) -> None:
        """`version`: the event's; orders this outcome against the job's other ones (`state_timestamp`)."""
        now, error = datetime.now(timezone.utc), (outcome.last_error or "")[:1000] or None
        self.session.execute(self._record, (
            event_id, sub.job_id, sub.tenant_id, sub.callback_url, event_type, outcome.status, outcome.attempts,
            outcome.last_status, error, now))
        self.session.execute(self._job_state, (
            sub.job_id, event_id, event_type, outcome.status, outcome.attempts, outcome.last_status, error, now,
            state_timestamp(version, outcome.status in FINAL, outcome.attempts)))
