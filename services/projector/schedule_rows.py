"""Schedule events -> rows of schedules_by_id, schedules_by_tenant and occurrences_by_schedule (migration
0005). Pure, and a function of the event alone: every event carries what its rows need, so no schedule
state is folded here. Each write is stamped with the event's version (the schedule's own numbering), so a
replay rewrites identical cells and a late older write loses, as for the job tables.
"""

from __future__ import annotations

import json
from typing import Any

from spotreel.domain import events as ev
from spotreel.domain.schedules import template_body
from spotreel.services.projector.rows import RowOp

SCHEDULES = "schedules_by_id"
TENANT_SCHEDULES = "schedules_by_tenant"
OCCURRENCES = "occurrences_by_schedule"
TABLES = (SCHEDULES, TENANT_SCHEDULES, OCCURRENCES)


def template_json(e: ev.ScheduleCreated) -> str:
    return json.dumps(template_body(e), sort_keys=True, separators=(",", ":"))


def _schedule(e: Any, **values: Any) -> RowOp:
    values.update(updated_at=e.at_ms, version=e.version)
    return RowOp(SCHEDULES, (("schedule_id", e.schedule_id),), tuple(values.items()), e.version)


def _occurrence(e: Any, at_ms: int, **values: Any) -> RowOp:
    values["version"] = e.version
    return RowOp(OCCURRENCES, (("schedule_id", e.schedule_id), ("occurrence_at", at_ms)), tuple(values.items()),
                 e.version)


def schedule_ops(event: Any) -> list[RowOp]:
    match event:
        case ev.ScheduleCreated():
            return [
                _schedule(event, tenant_id=event.tenant, status="active", cron=event.cron, timezone=event.timezone,
                          catch_up=event.missed_policy, grace_ms=event.grace_ms, max_catch_up=event.max_catchup,
                          overlap_policy=event.overlap_policy, template=template_json(event),
                          created_at=event.at_ms, next_occurrence_at=event.next_occurrence_ms),
                RowOp(TENANT_SCHEDULES, (("tenant_id", event.tenant), ("created_at", event.at_ms),
                                         ("schedule_id", event.schedule_id)), (("version", event.version),),
                      event.version),
            ]
        case ev.ScheduleAdvanced():
            return [_schedule(event, last_tick_at=event.through_ms, next_occurrence_at=event.next_occurrence_ms)]
        case ev.SchedulePaused():
            return [_schedule(event, status="paused")]
        case ev.ScheduleResumed():
            return [_schedule(event, status="active", last_tick_at=event.through_ms,
                              next_occurrence_at=event.next_occurrence_ms)]
        case ev.ScheduleDeleted():
            return [_schedule(event, status="deleted")]
        case ev.OccurrenceFired():
            return [_occurrence(event, event.occurrence_ms, status="fired", job_id=event.job_id, fired_at=event.at_ms,
                                late=event.late)]
        case ev.OccurrencesSkipped():
            return [_occurrence(event, event.first_occurrence_ms, status="skipped",
                                last_occurrence_at=event.last_occurrence_ms, reason=event.reason)]
        case ev.OccurrenceEnded():
            return [_occurrence(event, event.occurrence_ms, status=event.outcome, job_id=event.job_id,
                                ended_at=event.at_ms)]
    return []
