"""JobState <-> JSON bytes for the Faust table. The table is a cache derived from the events topic (the
system of record), so this format is private to the scheduler and may change with a table rebuild."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from spotreel.domain import events as ev
from spotreel.domain import retention
from spotreel.domain.schedules import ScheduleState
from spotreel.domain.spec import SPEC_FIELDS, RenderSpec
from spotreel.domain.state import Checkpoint, JobState, Lease

_TUPLE_FIELDS = ("parents", "recent_failures_ms", "pending_parents", "watchers")


def _plain(state: JobState) -> dict[str, Any]:
    """What `dataclasses.asdict` gives for a JobState (same keys, same order), without its recursive deep
    copy: the nested records are a RenderSpec, a Lease and Checkpoints, flat and immutable, so the deep copy
    is work for nothing on every table write (bench/handler_bench.py)."""
    d = dict(state.__dict__)
    d["spec"] = dict(state.spec.__dict__)
    if state.lease is not None:
        d["lease"] = dict(state.lease.__dict__)
    d["checkpoints"] = [dict(c.__dict__) for c in state.checkpoints]
    return d


def _nest_spec(d: dict[str, Any]) -> None:
    """`d["spec"]` as a RenderSpec; a dict stored before RenderSpec (the video's fields flat, a job's state or a
    schedule's ScheduleCreated) gets them moved into it: the same state, nested."""
    if "spec" in d:
        d["spec"] = RenderSpec(**d["spec"])
        return
    d["spec"] = RenderSpec.from_flat(d)
    for name in SPEC_FIELDS:
        d.pop(name, None)


def dumps(state: JobState) -> bytes:
    if state.evicted:
        raise ValueError(f"{state.job_id} is a summary: store it with dumps_summary under summary_key")
    return json.dumps(_plain(state), separators=(",", ":")).encode()


def loads(raw: bytes | None) -> JobState | None:
    if not raw:
        return None
    d: dict[str, Any] = json.loads(raw)
    _nest_spec(d)
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
    created = d["created"]
    _nest_spec(created)
    d["created"] = ev.ScheduleCreated(**created)
    d["running"] = tuple(d.get("running", ()))
    return ScheduleState(**d)


# Summaries of evicted jobs (domain/retention.py) live in the same table under "~e:<job_id>" (same changelog
# partition as the job), as a JSON list: the few fields a summary holds, ~100 bytes instead of the ~1.5 KB of a
# whole state.
SUMMARY_PREFIX = b"~e:"


def summary_key(job_id: str) -> bytes:
    return SUMMARY_PREFIX + job_id.encode()


def dumps_summary(state: JobState) -> bytes:
    return json.dumps([state.status, state.version, state.request_hash, state.updated_at_ms, state.tenant,
                       state.epoch],
                      separators=(",", ":")).encode()


def loads_summary(job_id: str, raw: bytes | None) -> JobState | None:
    if not raw:
        return None
    status, version, request_hash, updated_at_ms, tenant, epoch = json.loads(raw)
    return retention.summary(job_id, status, version, request_hash, updated_at_ms, tenant, epoch)
