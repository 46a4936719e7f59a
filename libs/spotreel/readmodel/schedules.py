"""Read API over the schedule tables (migration 0005), for the gateway: plain dataclasses out."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cassandra.cluster import Session
from cassandra.concurrent import execute_concurrent_with_args

from spotreel.readmodel.jobs import _ms


@dataclass(frozen=True)
class ScheduleView:
    schedule_id: str
    tenant_id: str
    status: str
    cron: str
    timezone: str
    catch_up: str
    grace_ms: int
    max_catch_up: int
    overlap_policy: str
    template: dict[str, Any]
    created_at_ms: int | None
    updated_at_ms: int | None
    next_occurrence_at_ms: int | None
    last_tick_at_ms: int | None
    version: int


@dataclass(frozen=True)
class SchedulePage:
    items: list[ScheduleView]
    page_state: bytes | None


@dataclass(frozen=True)
class OccurrenceView:
    occurrence_at_ms: int
    status: str
    job_id: str | None
    fired_at_ms: int | None
    ended_at_ms: int | None
    late: bool | None
    last_occurrence_at_ms: int | None
    reason: str | None


@dataclass(frozen=True)
class OccurrencePage:
    items: list[OccurrenceView]
    page_state: bytes | None


def _view(r: Any) -> ScheduleView:
    return ScheduleView(
        schedule_id=r.schedule_id, tenant_id=r.tenant_id, status=r.status, cron=r.cron, timezone=r.timezone,
        catch_up=r.catch_up, grace_ms=r.grace_ms or 0, max_catch_up=r.max_catch_up or 0,
        overlap_policy=r.overlap_policy or "allow", template=json.loads(r.template or "{}"),
        created_at_ms=_ms(r.created_at), updated_at_ms=_ms(r.updated_at),
        next_occurrence_at_ms=_ms(r.next_occurrence_at), last_tick_at_ms=_ms(r.last_tick_at), version=r.version or 0,
    )


class ScheduleReads:
    def __init__(self, session: Session) -> None:
        self.session = session
        self._one = session.prepare("SELECT * FROM schedules_by_id WHERE schedule_id = ?")
        self._ids = session.prepare("SELECT schedule_id FROM schedules_by_tenant WHERE tenant_id = ?")
        self._occurrences = session.prepare("SELECT * FROM occurrences_by_schedule WHERE schedule_id = ?")

    def get_schedule(self, schedule_id: str) -> ScheduleView | None:
        r = self.session.execute(self._one, (schedule_id,)).one()
        if r is None or r.status is None or r.tenant_id is None:
            return None
        return _view(r)

    def list_schedules(self, tenant: str, limit: int, page_state: bytes | None) -> SchedulePage:
        """A tenant's schedules, newest first, deleted ones included (status "deleted")."""
        bound = self._ids.bind((tenant,))
        bound.fetch_size = limit
        result = self.session.execute(bound, paging_state=page_state)
        ids = [(r.schedule_id,) for r in result.current_rows[:limit]]
        rows = execute_concurrent_with_args(self.session, self._one, ids, concurrency=32, raise_on_first_error=True)
        items = [_view(r) for _, found in rows for r in found if r.status is not None and r.tenant_id is not None]
        return SchedulePage(items, result.paging_state)

    def occurrences(self, schedule_id: str, limit: int, page_state: bytes | None) -> OccurrencePage:
        """Past occurrences, newest first."""
        bound = self._occurrences.bind((schedule_id,))
        bound.fetch_size = limit
        result = self.session.execute(bound, paging_state=page_state)
        items = [OccurrenceView(_ms(r.occurrence_at) or 0, r.status, r.job_id, _ms(r.fired_at), _ms(r.ended_at),
                                r.late, _ms(r.last_occurrence_at), r.reason)
                 for r in result.current_rows[:limit]]
        return OccurrencePage(items, result.paging_state)
