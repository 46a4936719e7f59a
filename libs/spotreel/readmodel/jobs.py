"""Read API over the projector's tables, for the gateway: plain dataclasses out, no driver types leak."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from cassandra.cluster import Session
from cassandra.query import SimpleStatement


def _ms(value: datetime | None) -> int | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return int(value.timestamp() * 1000)


@dataclass(frozen=True)
class JobView:
    job_id: str
    tenant_id: str
    status: str
    pool: str
    model: str
    priority: int
    prompt: str
    params: dict[str, Any]
    idempotency_key: str
    created_at_ms: int | None
    updated_at_ms: int | None
    run_at_ms: int | None
    attempt: int
    max_attempts: int
    preemptions: int
    lease_epoch: int | None
    worker_id: str | None
    lease_expires_at_ms: int | None
    step: int
    total_steps: int
    progress_pct: float
    reported_pct: float
    phase: str | None
    resuming: bool
    resume_from_pct: float | None
    checkpoint_key: str | None
    cancel_requested: bool
    pause_requested: bool
    result_key: str | None
    result_sha256: str | None
    result_size_bytes: int | None
    error: str | None
    terminal_reason: str | None
    version: int
    # When the video was deleted through the OpenAI-compatible surface (migration 0011); None: not deleted.
    deleted_at_ms: int | None = None
    # When the job's personal data was erased (JobErased, migration 0015); its answers are 410 from then on.
    erased_at_ms: int | None = None


@dataclass(frozen=True)
class JobListItem:
    job_id: str
    status: str
    priority: int
    prompt: str
    created_at_ms: int | None
    updated_at_ms: int | None
    version: int


@dataclass(frozen=True)
class JobPage:
    items: list[JobListItem]
    page_state: bytes | None  # pass back to get the next page; None: this was the last


@dataclass(frozen=True)
class HistoryEntry:
    """An accepted event (`rejected` False, `version` its slot) or a rejected command (`version` the one it
    was judged against; it sorts after that accepted event)."""

    version: int
    event_type: str
    occurred_at_ms: int | None
    summary: str
    rejected: bool = False
    payload: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class AttemptView:
    lease_epoch: int
    worker_id: str | None
    pool: str | None
    status: str | None
    started_at_ms: int | None
    ended_at_ms: int | None
    start_step: int | None
    last_step: int | None
    reason: str | None


class ReadModels:
    def __init__(self, session: Session) -> None:
        self.session = session
        self._job = session.prepare("SELECT * FROM jobs_by_id WHERE job_id = ?")
        self._list = session.prepare("SELECT job_id, status, priority, prompt, created_at, updated_at, version "
                                     "FROM jobs_by_tenant WHERE tenant_id = ?")
        # One tenant's partition only, so the filter reads no other partition.
        self._list_status = session.prepare(
            "SELECT job_id, status, priority, prompt, created_at, updated_at, version FROM jobs_by_tenant "
            "WHERE tenant_id = ? AND status = ? ALLOW FILTERING")
        self._events = session.prepare("SELECT version, event_type, occurred_at, summary, payload "
                                       "FROM events_by_job WHERE job_id = ?")
        self._rejections = session.prepare("SELECT version, command_id, command_type, reason, detail, occurred_at, "
                                           "payload FROM rejections_by_job WHERE job_id = ?")
        self._attempts = session.prepare("SELECT * FROM attempts_by_job WHERE job_id = ?")

    def get_job(self, job_id: str) -> JobView | None:
        r = self.session.execute(self._job, (job_id,)).one()
        if r is None or r.status is None:
            return None
        return JobView(
            job_id=r.job_id, tenant_id=r.tenant_id, status=r.status, pool=r.pool, model=r.model,
            priority=r.priority or 0, prompt=r.prompt, params=json.loads(r.params or "{}"),
            idempotency_key=r.idempotency_key, created_at_ms=_ms(r.created_at), updated_at_ms=_ms(r.updated_at),
            run_at_ms=_ms(r.run_at), attempt=r.attempt or 0, max_attempts=r.max_attempts or 0,
            preemptions=r.preemptions or 0, lease_epoch=r.lease_epoch, worker_id=r.worker_id,
            lease_expires_at_ms=_ms(r.lease_expires_at), step=r.step or 0, total_steps=r.total_steps or 0,
            progress_pct=r.progress_pct or 0.0, reported_pct=r.reported_pct or 0.0, phase=r.phase,
            resuming=bool(r.resuming), resume_from_pct=r.resume_from_pct, checkpoint_key=r.checkpoint_key,
            cancel_requested=bool(r.cancel_requested), pause_requested=bool(r.pause_requested),
            result_key=r.result_key, result_sha256=r.result_sha256, result_size_bytes=r.result_size_bytes,
            error=r.error, terminal_reason=r.terminal_reason, version=r.version or 0,
            deleted_at_ms=_ms(getattr(r, "deleted_at", None)),
            erased_at_ms=_ms(getattr(r, "erased_at", None)),
        )

    def list_jobs(self, tenant: str, status: str | None = None, limit: int = 50,
                  page_state: bytes | None = None) -> JobPage:
        """A tenant's jobs, newest first, `limit` per page."""
        stmt, params = (self._list, (tenant,)) if status is None else (self._list_status, (tenant, status))
        bound = stmt.bind(params)
        bound.fetch_size = limit  # on the bound statement: the prepared one is shared between callers
        result = self.session.execute(bound, paging_state=page_state)
        rows = result.current_rows[:limit]
        items = [JobListItem(r.job_id, r.status, r.priority or 0, r.prompt, _ms(r.created_at), _ms(r.updated_at),
                             r.version or 0) for r in rows]
        return JobPage(items, result.paging_state)

    def list_jobs_from(self, tenant: str, after: tuple[int, str] | None, ascending: bool,
                       limit: int) -> list[JobListItem]:
        """Up to `limit` of a tenant's jobs after the job `after` (its created_at ms and id) in the order asked:
        newest first (the table's order: created_at descending, then job_id ascending) or its exact reverse.
        The cursor of the OpenAI-compatible list, whose `after` is a video id."""
        order = " ORDER BY created_at ASC, job_id DESC" if ascending else ""
        where = "" if after is None else (" AND created_at >= %s" if ascending else " AND created_at <= %s")
        cql = ("SELECT job_id, status, priority, prompt, created_at, updated_at, version FROM jobs_by_tenant "
               f"WHERE tenant_id = %s{where}{order}")
        stmt = SimpleStatement(cql, fetch_size=limit + 2)
        args: tuple[Any, ...] = (tenant,) if after is None else (tenant, datetime.fromtimestamp(after[0] / 1000,
                                                                                                  tz=timezone.utc))
        out: list[JobListItem] = []
        for r in self.session.execute(stmt, args):
            created = _ms(r.created_at)
            if after is not None and created == after[0] and (
                    r.job_id >= after[1] if ascending else r.job_id <= after[1]):
                continue  # the cursor's own row, and those before it at the same millisecond
            out.append(JobListItem(r.job_id, r.status, r.priority or 0, r.prompt, created, _ms(r.updated_at),
                                   r.version or 0))
            if len(out) >= limit:
                break
        return out

    def mark_deleted(self, job_id: str, at_ms: int) -> None:
        self.session.execute("UPDATE jobs_by_id SET deleted_at = %s WHERE job_id = %s",
                             (datetime.fromtimestamp(at_ms / 1000, tz=timezone.utc), job_id))

    def job_events(self, job_id: str) -> list[HistoryEntry]:
        entries = [HistoryEntry(r.version, r.event_type, _ms(r.occurred_at), r.summary or "", False, r.payload or b"")
                   for r in self.session.execute(self._events, (job_id,))]
        for r in self.session.execute(self._rejections, (job_id,)):
            entries.append(HistoryEntry(r.version, "CommandRejected", _ms(r.occurred_at),
                                        f"CommandRejected {r.command_type} reason={r.reason} {r.detail}".strip(),
                                        True, r.payload or b""))
        entries.sort(key=lambda e: (e.version, e.rejected, e.occurred_at_ms or 0))
        return entries

    def job_attempts(self, job_id: str) -> list[AttemptView]:
        return [AttemptView(r.lease_epoch, r.worker_id, r.pool, r.status, _ms(r.started_at), _ms(r.ended_at),
                            r.start_step, r.last_step, r.reason)
                for r in self.session.execute(self._attempts, (job_id,))]
