"""Schedule events project to schedules_by_id / schedules_by_tenant / occurrences_by_schedule rows, stamped
with the schedule's event version; the batched projection writes the same rows as one event at a time, and
job events in the same batch are projected as before."""

from __future__ import annotations

import pytest

from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.services.projector.projection import project, project_batch
from spotreel.services.projector.rows import Envelope
from spotreel.services.projector.schedule_rows import OCCURRENCES, SCHEDULES, TENANT_SCHEDULES, schedule_ops
from tests.unit.test_job_schedules import HOUR, MIN, T, Sched

pytestmark = pytest.mark.unit


def history() -> list:
    s = Sched(overlap_policy="skip", missed_policy="run_all", timezone="Europe/Paris")
    s.fire(T + HOUR)
    s.fire(T + 2 * HOUR)  # skipped: the first still runs
    s.send(c.EndOccurrence("e", "nightly", T + HOUR, "failed"), T + 2 * HOUR + MIN)
    s.send(c.PauseSchedule("p", "nightly"), T + 2 * HOUR + 2 * MIN)
    s.send(c.ResumeSchedule("r", "nightly"), T + 5 * HOUR)
    s.send(c.DeleteSchedule("d", "nightly"), T + 5 * HOUR + MIN)
    s.send(c.DeleteSchedule("d2", "nightly"), T + 5 * HOUR + 2 * MIN)  # refused: no rows
    return s.history


def test_rows_of_each_schedule_event() -> None:
    events = history()
    created = events[0]
    ops = schedule_ops(created)
    assert {op.table for op in ops} == {SCHEDULES, TENANT_SCHEDULES}
    row = dict(ops[0].values)
    assert (row["tenant_id"], row["status"], row["timezone"], row["overlap_policy"], row["catch_up"]) == (
        "acme", "active", "Europe/Paris", "skip", "run_all")
    assert ops[0].timestamp == created.version == 1
    by_type = {type(e).__name__: e for e in events}
    [fired] = schedule_ops(by_type["OccurrenceFired"])
    assert fired.table == OCCURRENCES and dict(fired.key)["occurrence_at"] == T + HOUR
    assert dict(fired.values)["status"] == "fired" and dict(fired.values)["job_id"] == by_type["OccurrenceFired"].job_id
    [ended] = schedule_ops(by_type["OccurrenceEnded"])
    assert ended.key == fired.key and dict(ended.values)["status"] == "failed" and ended.timestamp > fired.timestamp
    skipped = [e for e in events if isinstance(e, ev.OccurrencesSkipped)]
    assert [dict(schedule_ops(e)[0].values)["reason"] for e in skipped] == ["overlap", "paused"]
    assert dict(schedule_ops(by_type["SchedulePaused"])[0].values)["status"] == "paused"
    assert dict(schedule_ops(by_type["ScheduleDeleted"])[0].values)["status"] == "deleted"
    rejected = ev.ScheduleCommandRejected("nightly", 9, T, "x", "x", "DeleteSchedule", "schedule_deleted", "")
    assert schedule_ops(rejected) == [] and project(None, rejected) == (None, [])


def test_batched_projection_writes_the_same_schedule_rows() -> None:
    events = history()
    one_by_one = [op for e in events for op in project(None, e)[1]]
    assert one_by_one == [op for e in events for op in schedule_ops(e)] and one_by_one
    batched, states = project_batch([(e, Envelope()) for e in events], lambda _: None)
    assert sorted(batched) == sorted(one_by_one) and states == {}
