"""JobState <-> JSON bytes for the Faust table. The table is a cache derived from the events topic (the
system of record), so this format is private to the scheduler and may change with a table rebuild."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from spotreel.domain import events as ev
from spotreel.domain.schedules import ScheduleState
from spotreel.domain.state import Checkpoint, JobState, Lease

_TUPLE_FIELDS = ("parents", "recent_failures_ms", "pending_parents", "watchers")


def dumps(state: JobState) -> bytes:
    return json.dumps(dataclasses.asdict(state), separators=(",", ":")).encode()


def loads(raw: bytes | None) -> JobState | None:
    if not raw:
        return None
    d: dict[str, Any] = json.loads(raw)
    for name in _TUPLE_FIELDS:
        d[name] = tuple(d.get(name, ()))
    d["parent_outcomes"] = tuple(tuple(p) for p in d["parent_outcomes"])
    d["checkpoints"] = tuple(Checkpoint(**c) for c in d["checkpoints"])
    d["lease"] = Lease(**d["lease"]) if d["lease"] is not None else None
    if d.get("step_mark") is not None:
        d["step_mark"] = tuple(d["step_mark"])
    return JobState(**d)


def dumps_schedule(state: ScheduleState) -> bytes:
    return json.dumps(dataclasses.asdict(state), separators=(",", ":")).encode()


def loads_schedule(raw: bytes | None) -> ScheduleState | None:
    if not raw:
        return None
    d: dict[str, Any] = json.loads(raw)
    d["created"] = ev.ScheduleCreated(**d["created"])
    d["running"] = tuple(d.get("running", ()))
    return ScheduleState(**d)
