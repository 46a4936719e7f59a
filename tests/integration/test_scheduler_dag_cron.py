"""DAG advancement and cron schedules through the real scheduler: parents and children on different
partitions (the WatchParent / ResolveParent handshake), and one job per occurrence even when
FireOccurrence is redelivered."""

from __future__ import annotations

import time
import uuid

import pytest

from spotreel.adapters.partitioning import partition_for
from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.domain.spec import RenderSpec
from spotreel.domain import ids
from spotreel.domain.state import Status
from tests.integration.schedkit import GPU, Bus, scheduler_plane, scheduler_settings, submit


@pytest.fixture(scope="module")
def env(stack, tmp_path_factory):
    settings = scheduler_settings("d" + uuid.uuid4().hex[:10], partitions=3)
    with scheduler_plane(settings, tmp_path_factory.mktemp("dag")) as (_, bus):
        yield settings, bus


def _keys_on_distinct_partitions(n: int, partitions: int, tenant: str = "acme") -> list[str]:
    keys, used = [], set()
    while len(keys) < n:
        k = uuid.uuid4().hex[:8]
        p = partition_for(ids.job_id_for(tenant, k), partitions)
        if p not in used:
            used.add(p)
            keys.append(k)
    return keys


def _run(bus: Bus, job_id: str, model: str | None = None, ok: bool = True) -> None:
    a = bus.request_work("w-" + uuid.uuid4().hex[:6], model=model or bus.state(job_id).spec.model)
    assert isinstance(a, ev.WorkAssigned) and a.job_id == job_id, a
    if ok:
        bus.send(c.CompleteJob(bus.next_id("done"), job_id, a.epoch, a.worker_id, "k", "sha", 1))
        bus.wait_event(job_id, ev.JobSucceeded)
    else:
        bus.send(c.FailJob(bus.next_id("fail"), job_id, a.epoch, a.worker_id, "oom", "x", retryable=False))
        bus.wait_event(job_id, ev.JobFailed)


def _dag(bus: Bus, settings, policy: str):
    # One pool (model) per job, so a worker asking for the child's pool can only get the child.
    ka, kb, kc = _keys_on_distinct_partitions(3, settings.partitions)
    a, b = submit("acme", ka, model="m-" + ka), submit("acme", kb, model="m-" + kb)
    model = "m-" + kc
    for s in (a, b):
        bus.send(s)
        bus.wait_event(s.job_id, ev.JobQueued)
    child = submit("acme", kc, model=model, parents=(a.job_id, b.job_id), dag_policy=policy)
    bus.send(child)
    bus.wait_event(child.job_id, ev.JobWaiting)
    for s in (a, b):  # both parents record the watch
        bus.wait_event(s.job_id, ev.ParentWatched)
    return model, a.job_id, b.job_id, child.job_id


def _model(bus: Bus, job_id: str) -> str:
    return bus.state(job_id).spec.model


def test_fail_fast_child_runs_only_after_both_parents_succeed(env):
    settings, bus = env
    model, a, b, child = _dag(bus, settings, "fail_fast")
    _run(bus, a)
    bus.wait_event(child, ev.ParentResolved)
    assert bus.state(child).status == Status.WAITING
    # The child is not dispatchable yet.
    assert isinstance(bus.request_work("w-early", model=model, timeout=1.0), ev.NoWorkAvailable)
    _run(bus, b)
    assert bus.wait_event(child, ev.JobQueued).reason == "parents_resolved"
    assert dict(bus.state(child).parent_outcomes) == {a: "succeeded", b: "succeeded"}
    _run(bus, child, model)


def test_fail_fast_child_is_cancelled_naming_the_failed_parent(env):
    settings, bus = env
    model, a, b, child = _dag(bus, settings, "fail_fast")
    _run(bus, a, ok=False)
    cancelled = bus.wait_event(child, ev.JobCancelled)
    assert cancelled.reason == "parent_failed"
    resolved = [e for e in bus.job_events(child) if isinstance(e, ev.ParentResolved)]
    assert [(e.parent_id, e.outcome) for e in resolved] == [(a, "failed")]
    # B still ends normally; its resolve reaches a cancelled child and is refused there, nothing else.
    _run(bus, b)
    bus.wait_for(lambda: [e for e in bus.job_events(child) if isinstance(e, ev.CommandRejected)], 20, "refusal")
    assert bus.state(child).status == Status.CANCELLED


def test_continue_child_runs_once_all_parents_are_terminal(env):
    settings, bus = env
    model, a, b, child = _dag(bus, settings, "continue")
    _run(bus, a, ok=False)
    bus.wait_event(child, ev.ParentResolved)
    assert bus.state(child).status == Status.WAITING
    _run(bus, b)
    bus.wait_event(child, ev.JobQueued)
    assert dict(bus.state(child).parent_outcomes) == {a: "failed", b: "succeeded"}


def test_a_child_of_a_finished_parent_and_of_an_unknown_one(env):
    settings, bus = env
    model = "m-" + uuid.uuid4().hex[:6]
    parent = submit("acme", uuid.uuid4().hex[:8], model=model)
    bus.send(parent)
    bus.wait_event(parent.job_id, ev.JobQueued)
    _run(bus, parent.job_id, model)
    late = submit("acme", uuid.uuid4().hex[:8], model=model, parents=(parent.job_id,))
    bus.send(late)  # the parent is already terminal: answered at once
    assert bus.wait_event(late.job_id, ev.JobQueued).reason == "parents_resolved"
    orphan = submit("acme", uuid.uuid4().hex[:8], model=model, parents=("jdoesnotexist",))
    bus.send(orphan)
    assert bus.wait_event(orphan.job_id, ev.JobCancelled).reason == "parent_failed"


def test_cron_run_all_submits_each_missed_occurrence_exactly_once(env):
    settings, bus = env
    sid = "sched-" + uuid.uuid4().hex[:8]
    minute, hour = 60_000, 3_600_000
    # Hourly, at the minute half an hour from now: no live occurrence can fall inside the test (an every-minute
    # cron did, when the test ran across a minute boundary: a fifth, legitimate firing). Started just after
    # the occurrence 11 hours before the next one: exactly 10 occurrences missed.
    upcoming = (int(time.time() * 1000) // minute + 30) * minute
    start = upcoming - 11 * hour + 1
    cron = f"{(upcoming // minute) % 60} * * * *"
    model = "m-" + uuid.uuid4().hex[:6]
    bus.send(c.CreateSchedule("cs-" + sid, sid, "acme", cron, "UTC", "run_all",
                              RenderSpec(model, "tick", 1.0, "64x64", 8, 1, 4), GPU, start_ms=start, max_catchup=4))
    fired = bus.wait_for(lambda: [e for e in bus.events if isinstance(e, ev.OccurrenceFired)
                                  and e.schedule_id == sid] if len(
        [e for e in bus.events if isinstance(e, ev.OccurrenceFired) and e.schedule_id == sid]) >= 4 else None,
        30, "4 occurrences fired")
    assert len(fired) == 4
    skipped = [e for e in bus.events if isinstance(e, ev.OccurrencesSkipped) and e.schedule_id == sid]
    assert len(skipped) == 1
    # The newest four of the ten are run, the six before them skipped as one range.
    assert sorted(f.occurrence_ms for f in fired) == [upcoming - k * hour for k in (4, 3, 2, 1)]
    assert (skipped[0].first_occurrence_ms, skipped[0].last_occurrence_ms) == (upcoming - 10 * hour,
                                                                               upcoming - 5 * hour)
    for f in fired:
        bus.wait_event(f.job_id, ev.JobQueued)
    # A redelivered (or duplicated) firing: the schedule is not due, nothing new is submitted.
    bus.send(c.FireOccurrence("again-" + sid, sid))
    bus.send(c.FireOccurrence("again-" + sid, sid))
    bus.poll(2.0)
    fired_again = [e for e in bus.events if isinstance(e, ev.OccurrenceFired) and e.schedule_id == sid]
    assert len(fired_again) == 4
    submitted = [e for e in bus.events if isinstance(e, ev.JobSubmitted) and e.schedule_id == sid]
    assert sorted(e.occurrence_ms for e in submitted) == sorted(f.occurrence_ms for f in fired)
    assert len({e.job_id for e in submitted}) == 4
    # The same occurrence's SubmitJob sent twice (a re-sent follow-up): the second is a no-op.
    bus.send(c.SubmitJob(**{**_submit_fields(submitted[0]), "command_id": "dup"}))
    bus.poll(1.0)
    assert len([e for e in bus.events if isinstance(e, ev.JobSubmitted) and e.schedule_id == sid]) == 4
    bus.send(c.DeleteSchedule("del-" + sid, sid))
    bus.wait_for(lambda: [e for e in bus.events if isinstance(e, ev.ScheduleDeleted) and e.schedule_id == sid],
                 20, "deleted")


def _submit_fields(e: ev.JobSubmitted) -> dict:
    names = c.SubmitJob.__dataclass_fields__
    return {k: getattr(e, k) for k in names if hasattr(e, k) and k != "command_id"}


def test_cron_cancel_previous_and_each_occurrence_job_reports_its_end(env):
    """Two missed occurrences fire in one tick under cancel_previous: the newer one's follow-up cancels the
    older job, whose JobCancelled (on its own partition) comes back to the schedule as EndOccurrence; the
    newer job's success is recorded the same way."""
    settings, bus = env
    sid = "ovl-" + uuid.uuid4().hex[:8]
    minute, hour = 60_000, 3_600_000
    upcoming = (int(time.time() * 1000) // minute + 30) * minute
    cron = f"{(upcoming // minute) % 60} * * * *"
    model = "m-" + uuid.uuid4().hex[:6]
    bus.send(c.CreateSchedule("cs-" + sid, sid, "acme", cron, "Europe/Paris", "run_all",
                              RenderSpec(model, "tick", 1.0, "64x64", 8, 1, 4), GPU, start_ms=upcoming - 3 * hour + 1,
                              overlap_policy="cancel_previous"))

    def of(cls):
        return [e for e in bus.events if isinstance(e, cls) and e.schedule_id == sid]

    fired = bus.wait_for(lambda: of(ev.OccurrenceFired) if len(of(ev.OccurrenceFired)) >= 2 else None, 30,
                         "2 occurrences fired")
    older, newer = sorted(fired, key=lambda e: e.occurrence_ms)
    assert (older.occurrence_ms, newer.occurrence_ms) == (upcoming - 2 * hour, upcoming - hour)
    cancelled = bus.wait_event(older.job_id, ev.JobCancelled)
    assert cancelled.reason == "overlap"
    ended = bus.wait_for(lambda: of(ev.OccurrenceEnded) or None, 20, "the older occurrence's end")
    assert [(e.occurrence_ms, e.job_id, e.outcome) for e in ended] == [(older.occurrence_ms, older.job_id,
                                                                        "cancelled")]
    _run(bus, newer.job_id, model=model)
    ended = bus.wait_for(lambda: of(ev.OccurrenceEnded) if len(of(ev.OccurrenceEnded)) >= 2 else None, 20,
                         "the newer occurrence's end")
    assert ended[-1].occurrence_ms == newer.occurrence_ms and ended[-1].outcome == "succeeded"
    bus.send(c.DeleteSchedule("del-" + sid, sid))
    bus.wait_for(lambda: of(ev.ScheduleDeleted), 20, "deleted")
