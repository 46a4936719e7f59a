"""Golden histories: recorded event streams that must keep folding to the recorded states.

Each file under golden/ holds the commands' outcome as events (rejections included, which must fold to
nothing) and the state they fold to. Two checks:
  * replay: the stored events fold to the stored state, so a change in `evolve` that would rebuild a
    different state from history already in Kafka fails here;
  * decide: running the scenario's commands today yields the same events, so a change in `decide` is seen.
A deliberate change regenerates the files: SPOTREEL_UPDATE_GOLDEN=1 pytest tests/unit/test_job_golden.py,
and the diff goes through review like code.

The files hold a job's RenderSpec flat (model, prompt, seed, ... beside gpu_type), as every history was
recorded before the spec was one record: an event is read back through the codec's own lift
(codec/upcast.py, the one that reads a JobSubmitted written under a released flat version), and a state or
event is compared with its spec flattened, so the histories recorded before the change replay unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spotreel.codec.upcast import nest_render_spec
from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.domain.evolve import fold
from spotreel.domain.schedules import decide_schedule, fold_schedule
from spotreel.domain.spec import RenderSpec
from tests.unit.jobkit import T0, Driver, leased_job

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden"
BY_NAME = {cls.__name__: cls for cls in ev.ALL_EVENTS}


def _flat_spec(d: dict[str, Any]) -> dict[str, Any]:
    """The record with its `spec` (if any) flattened into it, as the files hold it; likewise the
    ScheduleCreated a schedule's state holds (`created`)."""
    spec = d.pop("spec", None)
    out = {**d, **spec} if isinstance(spec, dict) else d
    if isinstance(out.get("created"), dict):
        out["created"] = _flat_spec(out["created"])
    return out


def encode_event(event: Any) -> dict[str, Any]:
    return {"type": type(event).__name__, **_flat_spec(json.loads(json.dumps(dataclasses.asdict(event))))}


def decode_event(record: dict[str, Any]) -> Any:
    cls = BY_NAME[record["type"]]
    hints = typing.get_type_hints(cls)
    fields: dict[str, Any] = {}
    if "spec" in {f.name for f in dataclasses.fields(cls)} and "spec" not in record:
        record = nest_render_spec(dict(record))  # recorded flat: lifted as the codec lifts an old record
        fields["spec"] = RenderSpec(**record.pop("spec"))
    for f in dataclasses.fields(cls):
        if f.name in fields:
            continue
        if f.name not in record and f.default is not dataclasses.MISSING:
            continue  # a field added later, with its default (as Avro resolves a record written before it)
        value = record[f.name]
        fields[f.name] = tuple(value) if typing.get_origin(hints[f.name]) is tuple else value
    return cls(**fields)


def encode_state(state: Any) -> Any:
    return _flat_spec(json.loads(json.dumps(dataclasses.asdict(state)))) if state is not None else None


# --- scenarios ---------------------------------------------------------------------------------------------


def happy_path() -> list[Any]:
    d = leased_job()
    d.progress(25.0, step=5)
    d.checkpoint(5, 25.0)
    d.progress(80.0, step=16, phase="encoding")
    d.complete()
    return d.history


def preempted_and_resumed() -> list[Any]:
    d = leased_job(keep_checkpoints=2)
    for step in (2, 4, 6):
        d.progress(step * 5.0, step=step)
        d.checkpoint(step, step * 5.0)
    d.progress(40.0, step=8)
    d.expire()
    d.grant(worker="w2")
    d.progress(35.0, step=7)
    d.release(reason="spot_interruption")
    d.grant(worker="w3")
    d.progress(45.0, step=9)
    d.renew()
    d.complete(epoch=1, worker="w1")  # a stale worker finishing late: rejected
    d.complete()
    return d.history


def preempted_for_higher_tier() -> list[Any]:
    """The scheduler asks a priority-1 lease back (PreemptLease); the holder drains as for a pause, the job is
    requeued (preempted_for) without spending an attempt, resumes from its checkpoint and finishes."""
    d = leased_job(priority=1)
    d.progress(30.0, step=6)
    d.send(c.PreemptLease("preempt:1", d.job_id, 1, 9), advance=1_000)
    d.send(c.PreemptLease("preempt:2", d.job_id, 1, 9))  # asked already: rejected
    d.renew()
    d.checkpoint(6, 30.0)
    d.release(reason="paused")
    d.grant(worker="w2")
    d.progress(60.0, step=12)
    d.complete()
    return d.history


def retries_dead_letter_and_requeue() -> list[Any]:
    d = leased_job(max_attempts=2, poison_threshold=5)
    d.fail()
    d.activate(advance=10 * 60_000)
    d.grant(worker="w2")
    d.fail()
    d.requeue()
    d.grant(worker="w3")
    d.complete()
    return d.history


def cancel_while_running() -> list[Any]:
    d = leased_job()
    d.progress(10.0, step=2)
    d.cancel("user")
    d.complete()  # rejected: cancel requested
    d.release(reason="cancelled")
    return d.history


def render_options() -> list[Any]:
    """A job that sets its own guidance, negative prompt and sampler, preempted and finished on a second lease."""
    d = leased_job(guidance_scale=4.5, negative_prompt="blurry, text", sampler="dpmpp")
    d.progress(30.0, step=6)
    d.checkpoint(6, 30.0)
    d.expire()
    d.grant(worker="w2")
    d.complete()
    return d.history


def dag_pause_and_failure() -> list[Any]:
    d = Driver()
    d.submit(parents=("p1", "p2"), dag_policy="continue", run_at_ms=T0 + 30_000)
    d.pause()
    d.resolve("p1", "failed")
    d.resolve("p2", "succeeded")
    d.resume()
    d.activate(advance=30_000)
    d.send(c.Reprioritize("prio", d.job_id, 4))
    d.grant()
    d.checkpoint(3, 15.0)
    d.pause()
    d.release(reason="paused")
    d.resume()
    d.grant(worker="w2")
    d.fail(retryable=False)
    return d.history


def watched_parent() -> list[Any]:
    d = leased_job()
    d.send(c.WatchParent("watch:child1", d.job_id, "child1"))
    d.complete()
    d.send(c.WatchParent("watch:child2", d.job_id, "child2"))  # after the end: answered at once
    return d.history


def cron_schedule() -> list[Any]:
    hour = 3_600_000
    t = T0 // hour * hour
    create = c.CreateSchedule(
        "create", "hourly", "acme", "0 * * * *", "UTC", "run_all",
        RenderSpec("tiny-t2v", "clouds", 2.0, "512x512", 8, 3, 10), "h100", max_catchup=2,
    )
    state, history = None, []
    for command, now in (
        (create, t + 60_000),
        (c.FireOccurrence("f1", "hourly"), t + hour + 5),
        (c.FireOccurrence("f2", "hourly"), t + hour + 6),
        (c.FireOccurrence("f3", "hourly"), t + 5 * hour + 7),
        (c.DeleteSchedule("del", "hourly"), t + 5 * hour + 8),
    ):
        out = decide_schedule(state, command, now)
        state = fold_schedule(out, state)
        history.extend(out)
    return history


def cron_schedule_paused_and_overlapping() -> list[Any]:
    """A local-time schedule (New York, across the 2026-03-08 spring-forward), overlap skip, paused and
    resumed, the first occurrence's job ending."""
    hour = 3_600_000
    t = 1_772_841_600_000  # 2026-03-07 00:00 UTC
    create = c.CreateSchedule(
        "create", "ny", "acme", "30 2 * * *", "America/New_York", "run_all",
        RenderSpec("tiny-t2v", "dawn", 2.0, "512x512", 8, 3, 10), "h100", overlap_policy="skip",
    )
    state, history = None, []
    for command, now in (
        (create, t),
        (c.FireOccurrence("f1", "ny"), t + 8 * hour),  # 2026-03-07 02:30 EST
        (c.FireOccurrence("f2", "ny"), t + 31 * hour),  # 03:00 EDT (02:30 is in the gap): skipped, overlap
        (c.EndOccurrence("e1", "ny", t + 7 * hour + 30 * 60_000, "succeeded"), t + 32 * hour),
        (c.PauseSchedule("p", "ny"), t + 33 * hour),
        (c.ResumeSchedule("r", "ny"), t + 80 * hour),
    ):
        out = decide_schedule(state, command, now)
        state = fold_schedule(out, state)
        history.extend(out)
    return history


def cron_schedule_render_options() -> list[Any]:
    """A schedule whose template sets a time limit, guidance, a negative prompt and a sampler (CreateSchedule
    and ScheduleCreated v3), one occurrence fired."""
    hour = 3_600_000
    t = T0 // hour * hour
    create = c.CreateSchedule(
        "create", "hourly-options", "acme", "0 * * * *", "UTC", "skip",
        RenderSpec("tiny-t2v", "clouds", 2.0, "512x512", 8, 3, 10, guidance_scale=4.5,
                   negative_prompt="blurry, text", sampler="dpmpp"), "h100", timeout_ms=600_000,
    )
    state, history = None, []
    for command, now in ((create, t + 60_000), (c.FireOccurrence("f1", "hourly-options"), t + hour + 5)):
        out = decide_schedule(state, command, now)
        state = fold_schedule(out, state)
        history.extend(out)
    return history


def erased_while_running() -> list[Any]:
    """Erasure of a leased job: its holder is asked to stop, JobErased empties the state's personal fields,
    the release ends it cancelled; erased again once finished (recorded, not refused)."""
    d = leased_job(callback_url="https://hooks.example.test/h")
    d.progress(20.0, step=4)
    d.send(c.EraseJob("erase:1", d.job_id, by="tenant:t1"))
    d.release(reason="cancelled")
    d.send(c.EraseJob("erase:2", d.job_id, by="operator:ops", reason="tenant_left"))
    return d.history


JOB_SCENARIOS: dict[str, Callable[[], list[Any]]] = {
    f.__name__: f
    for f in (happy_path, preempted_and_resumed, preempted_for_higher_tier, retries_dead_letter_and_requeue,
              cancel_while_running, dag_pause_and_failure, watched_parent, render_options, erased_while_running)
}
SCENARIOS: dict[str, Callable[[], list[Any]]] = {**JOB_SCENARIOS, "cron_schedule": cron_schedule,
                                                 "cron_schedule_paused_and_overlapping":
                                                     cron_schedule_paused_and_overlapping,
                                                 "cron_schedule_render_options": cron_schedule_render_options}


def _fold(name: str, events: list[Any]) -> Any:
    return fold_schedule(events) if name.startswith("cron_schedule") else fold(events)


def _path(name: str) -> Path:
    return GOLDEN / f"{name}.json"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_golden_history(name: str) -> None:
    events = SCENARIOS[name]()
    if os.environ.get("SPOTREEL_UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        record = {"events": [encode_event(e) for e in events], "state": encode_state(_fold(name, events))}
        _path(name).write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")
    recorded = json.loads(_path(name).read_text())
    replayed = _fold(name, [decode_event(r) for r in recorded["events"]])
    assert _as_recorded(encode_state(replayed), recorded["state"]) == recorded["state"], \
        f"replaying {name} no longer gives the recorded state"
    assert [_as_recorded(encode_event(e), r) for e, r in zip(events, recorded["events"])] == recorded["events"] \
        and len(events) == len(recorded["events"]), f"decide now records {name} differently"


# Fields added after a history was recorded, and the default each must have where the history is silent: a
# state or event written before them reads with these, as Avro resolves an old record.
# (timeout_ms: a schedule's template, ScheduleCreated inside a schedule's state, gained it after a job's.)
ADDED_LATER = {"guidance_scale": None, "negative_prompt": None, "sampler": None, "timeout_ms": None, "input_image": None,
               # resume_match.py: fingerprints of leases and checkpoints, and the lease's resume choice.
               "fingerprint": "", "worker_fingerprint": "", "resume_reason": None, "resume_skipped_keys": [],
               "resume_detail": None}


def _as_recorded(encoded: Any, recorded: Any) -> Any:
    """`encoded` without the fields the recording predates, provided they hold their default (else kept, so
    the comparison fails), at every depth (a schedule's state holds its ScheduleCreated, a job's its checkpoints)."""
    if isinstance(encoded, list) and isinstance(recorded, list) and len(encoded) == len(recorded):
        return [_as_recorded(e, r) for e, r in zip(encoded, recorded)]
    if not isinstance(encoded, dict) or not isinstance(recorded, dict):
        return encoded
    return {k: _as_recorded(v, recorded.get(k)) for k, v in encoded.items()
            if k in recorded or k not in ADDED_LATER or v != ADDED_LATER[k]}


def test_golden_histories_cover_every_event_type() -> None:
    seen = {r["type"] for name in SCENARIOS for r in json.loads(_path(name).read_text())["events"]}
    assert {cls.__name__ for cls in ev.ALL_EVENTS} - seen == set()
