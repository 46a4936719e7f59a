"""Cassandra side of the gateway: the projector's read API, plus the gateway's own claims, placeholder rows,
pool load and API keys. The event loop never blocks on a query: a single statement is sent with the driver's
`execute_async` and its result handed back to the loop from the driver's I/O thread (`_execute`); calls
that page or run several statements (the read models) run in worker threads (`_call`)."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from typing import Any, Callable, TypeVar

from cassandra import DriverException, RequestExecutionException, RequestValidationException
from cassandra.cluster import NoHostAvailable, Session
from cassandra.protocol import ProtocolException

from spotreel.services.gateway.deps import Claim, PoolLoad, StoreUnavailable, Tenant
from spotreel.services.gateway.public.views import ACCEPTED, TERMINAL
from spotreel.readmodel.jobs import AttemptView, HistoryEntry, JobListItem, JobPage, JobView, ReadModels
from spotreel.readmodel.schedules import OccurrencePage, SchedulePage, ScheduleReads, ScheduleView
from spotreel.readmodel.webhooks import JOB_STATE_CQL, JobWebhookState, job_state_from_row

T = TypeVar("T")
# The projector stamps every job-row write with the event version (≥ 1, services/projector/projection.py),
# so a cell written at 0 loses to any projected value of the same cell, whatever order they land in.
PLACEHOLDER_TIMESTAMP = 0


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _ms(value: datetime | None) -> int:
    if value is None:
        return 0
    return int(value.replace(tzinfo=value.tzinfo or timezone.utc).timestamp() * 1000)


_UNAVAILABLE = (NoHostAvailable, DriverException, RequestExecutionException, OSError)


def _settle(done: asyncio.Future, rows: Any, exc: BaseException | None) -> None:
    if done.done():  # the awaiting request was cancelled (its client went away)
        return
    if exc is not None:
        done.set_exception(exc)
    else:
        done.set_result(rows)


async def _execute(session: Session, statement: Any, params: Any) -> Any:
    """One statement, without a worker thread: the driver's callback (on its I/O thread) settles a future of
    this loop. Returns the first row, or None."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()
    try:
        future = session.execute_async(statement, params)
    except _UNAVAILABLE as exc:
        raise StoreUnavailable(str(exc)) from exc
    future.add_callbacks(lambda rows: loop.call_soon_threadsafe(_settle, done, rows, None),
                         lambda exc: loop.call_soon_threadsafe(_settle, done, None, exc))
    try:
        rows = await done
    except _UNAVAILABLE as exc:
        raise StoreUnavailable(str(exc)) from exc
    return rows[0] if rows else None


async def _call(fn: Callable[..., T], *args: Any) -> T:
    try:
        return await asyncio.to_thread(fn, *args)
    except _UNAVAILABLE as exc:
        raise StoreUnavailable(str(exc)) from exc


class CassandraReads:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.models = ReadModels(session)
        self.schedules = ScheduleReads(session)
        p = session.prepare
        self._claim = p("INSERT INTO submission_claims (job_id, tenant_id, idempotency_key, request_hash, "
                        "accepted_at, model, pool, priority, prompt, params) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                        "IF NOT EXISTS")
        self._get_claim = p("SELECT * FROM submission_claims WHERE job_id = ?")
        self._forget_claim = p("UPDATE submission_claims SET prompt = null, params = null WHERE job_id = ?")
        self._drop_claim = p("DELETE FROM submission_claims WHERE job_id = ? IF request_hash = ?")
        self._placeholder = p(
            "INSERT INTO jobs_by_id (job_id, tenant_id, status, pool, model, priority, prompt, params, "
            "idempotency_key, created_at, updated_at, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0) "
            f"USING TIMESTAMP {PLACEHOLDER_TIMESTAMP}")
        self._pool = p("SELECT queued, workers_active, workers_idle, mean_generation_seconds FROM pool_stats "
                       "WHERE pool = ?")
        # The tenant's live jobs only (the projector deletes a job's row when it ends): bounded by the
        # in-flight guard itself, not by the tenant's whole history.
        self._statuses = p("SELECT status FROM tenant_live_jobs WHERE tenant_id = ?")
        self._webhook_state: Any = None
        self._webhook_events: Any = None

    async def get_job(self, job_id: str) -> JobView | None:
        return await _call(self.models.get_job, job_id)

    async def list_jobs(self, tenant: str, status: str | None, limit: int, page_state: bytes | None) -> JobPage:
        try:
            return await _call(self.models.list_jobs, tenant, status, limit, page_state)
        except (RequestValidationException, ProtocolException) as exc:
            # Only a stale page token (tokens are authenticated, pagetokens.py) makes this query invalid.
            raise ValueError(str(exc)) from exc

    async def list_jobs_from(self, tenant: str, after: tuple[int, str] | None, ascending: bool,
                             limit: int) -> list[JobListItem]:
        return await _call(self.models.list_jobs_from, tenant, after, ascending, limit)

    async def mark_deleted(self, job_id: str, at_ms: int) -> None:
        await _call(self.models.mark_deleted, job_id, at_ms)

    async def forget_claim_text(self, job_id: str) -> None:
        await _execute(self.session, self._forget_claim, (job_id,))

    async def job_events(self, job_id: str) -> list[HistoryEntry]:
        return await _call(self.models.job_events, job_id)

    async def job_attempts(self, job_id: str) -> list[AttemptView]:
        return await _call(self.models.job_attempts, job_id)

    async def write_webhook_events(self, job_id: str, events: list[str]) -> None:
        def write() -> None:
            # Prepared on first use, like webhook_state: a keyspace from before migration 0008 still serves
            # every request that asks for no filter (one that does gets 503 until it is migrated).
            if self._webhook_events is None:
                self._webhook_events = self.session.prepare(
                    "UPDATE webhook_subscriptions SET events = ? WHERE job_id = ?")
            self.session.execute(self._webhook_events, (set(events), job_id))
        try:
            await _call(write)
        except RequestValidationException as exc:
            raise StoreUnavailable(f"webhook_subscriptions.events is missing (migration 0008): {exc}") from exc

    async def write_webhook_style(self, job_id: str, style: str) -> None:
        await _execute(self.session, "UPDATE webhook_subscriptions SET payload_style = %s WHERE job_id = %s",
                       (style, job_id))

    async def webhook_state(self, job_id: str) -> JobWebhookState | None:
        def read() -> JobWebhookState | None:
            # Prepared on first use: a keyspace from before migration 0007 still serves every other route.
            if self._webhook_state is None:
                self._webhook_state = self.session.prepare(JOB_STATE_CQL)
            return job_state_from_row(self.session.execute(self._webhook_state, (job_id,)).one())
        try:
            return await _call(read)
        except RequestValidationException:
            return None  # the table does not exist yet (migration 0007 not applied)

    async def get_schedule(self, schedule_id: str) -> ScheduleView | None:
        return await _call(self.schedules.get_schedule, schedule_id)

    async def list_schedules(self, tenant: str, limit: int, page_state: bytes | None) -> SchedulePage:
        try:
            return await _call(self.schedules.list_schedules, tenant, limit, page_state)
        except (RequestValidationException, ProtocolException) as exc:
            raise ValueError(str(exc)) from exc

    async def schedule_occurrences(self, schedule_id: str, limit: int, page_state: bytes | None) -> OccurrencePage:
        try:
            return await _call(self.schedules.occurrences, schedule_id, limit, page_state)
        except (RequestValidationException, ProtocolException) as exc:
            raise ValueError(str(exc)) from exc

    async def pool_load(self, pool: str) -> PoolLoad | None:
        row = await _execute(self.session, self._pool, (pool,))
        if row is None:
            return None
        return PoolLoad(row.queued or 0, row.workers_active, row.workers_idle, row.mean_generation_seconds)

    async def unfinished_jobs(self, tenant: str) -> int:
        def count() -> int:
            return sum(1 for r in self.session.execute(self._statuses, (tenant,)) if r.status not in TERMINAL)
        return await _call(count)

    @staticmethod
    def _row_claim(r: Any) -> Claim:
        return Claim(job_id=r.job_id, tenant_id=r.tenant_id, idempotency_key=r.idempotency_key,
                     request_hash=r.request_hash, accepted_at_ms=_ms(r.accepted_at), model=r.model or "",
                     pool=r.pool or "", priority=r.priority or 0, prompt=r.prompt or "",
                     params=json.loads(r.params or "{}"))

    async def claim(self, c: Claim) -> Claim:
        params = (c.job_id, c.tenant_id, c.idempotency_key, c.request_hash, _dt(c.accepted_at_ms), c.model,
                  c.pool, c.priority, c.prompt, json.dumps(c.params, sort_keys=True))
        row = await _execute(self.session, self._claim, params)
        if row is None or row[0] is True:
            return c
        # Not applied: the row returned is the claim that holds the key.
        return self._row_claim(row)

    async def get_claim(self, job_id: str) -> Claim | None:
        row = await _execute(self.session, self._get_claim, (job_id,))
        return None if row is None else self._row_claim(row)

    async def drop_claim(self, c: Claim) -> None:
        await _execute(self.session, self._drop_claim, (c.job_id, c.request_hash))

    async def write_placeholder(self, c: Claim) -> None:
        at = _dt(c.accepted_at_ms)
        await _execute(self.session, self._placeholder,
                    (c.job_id, c.tenant_id, ACCEPTED, c.pool, c.model, c.priority, c.prompt,
                     json.dumps(c.params, sort_keys=True), c.idempotency_key, at, at))


class CassandraAuth:
    def __init__(self, session: Session) -> None:
        self.session = session
        self._key = session.prepare("SELECT tenant_id, kind, name, revoked_at FROM api_keys WHERE key_hash = ?")
        self._tenant = session.prepare("SELECT rate_per_minute, max_in_flight, disabled, max_priority, plan, "
                                       "webhook_secret FROM tenants WHERE tenant_id = ?")

    async def tenant_for_key_hash(self, key_hash: str) -> Tenant | None:
        row = await _execute(self.session, self._key, (key_hash,))
        if row is None or row.revoked_at is not None or row.kind != "tenant":
            return None
        t = await _execute(self.session, self._tenant, (row.tenant_id,))
        if t is None:
            return Tenant(row.tenant_id, webhook_secret_set=False)
        return Tenant(row.tenant_id, t.rate_per_minute, t.max_in_flight, bool(t.disabled), t.max_priority, t.plan,
                      webhook_secret_set=bool(t.webhook_secret))

    async def worker_key_name(self, key_hash: str) -> str | None:
        row = await _execute(self.session, self._key, (key_hash,))
        if row is None or row.revoked_at is not None or row.kind != "worker":
            return None
        return row.name or "worker"
