"""Bounded state through the real scheduler and Kafka (domain/retention.py): with a 1 s retention a finished
job leaves the table (a tombstone in the compacted changelog, its summary under "~e:<job>"), and still a
re-sent submission is a no-op, a child submitted afterwards runs, other commands are refused `evicted`, the
events topic still replays its history; after a restart whose catch-up reads the job's JobSubmitted again
the job is not resurrected."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from spotreel.adapters.kafka import read_partition
from spotreel.adapters.partitioning import partition_for
from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.platform.topics import changelog_topic
from spotreel.services.scheduler import replay, statecodec
from tests.integration.schedkit import (Bus, SchedulerProc, drop_topics, make_topics, rewind_commits,
                                        scheduler_settings, submit)

RETENTION = {"SPOTREEL_SCHEDULER_RETENTION_S": "1", "SPOTREEL_SCHEDULER_SUMMARY_RETENTION_S": "3600"}


@pytest.fixture
def env(stack, tmp_path):
    settings = replace(scheduler_settings("r" + uuid.uuid4().hex[:10], partitions=3), scheduler_retention_s=1,
                       scheduler_summary_retention_s=3600)
    make_topics(settings)
    procs: list[SchedulerProc] = []
    bus = Bus(settings)
    try:
        yield settings, bus, procs, tmp_path
    finally:
        bus.close()
        for proc in procs:
            proc.stop()
        drop_topics(settings)


def _changelog(settings, job_id: str) -> list[tuple[bytes, bytes | None]]:
    """(key, value) of the job's own key and its summary key, in changelog order."""
    p = partition_for(job_id, settings.partitions)
    keys = {job_id.encode(), statecodec.summary_key(job_id)}
    return [(m.key(), m.value()) for m in read_partition(settings.kafka_bootstrap, changelog_topic(settings, "jobs"), p)
            if m.key() in keys]


def _evicted(settings, job_id: str) -> bool:
    records = _changelog(settings, job_id)
    own = [v for k, v in records if k == job_id.encode()]
    summary = [v for k, v in records if k != job_id.encode()]
    return bool(own) and own[-1] is None and bool(summary) and summary[-1] is not None


def test_an_evicted_job_dedups_resolves_children_replays_and_stays_evicted_after_a_restart(env):
    settings, bus, procs, tmp = env
    procs.append(SchedulerProc(settings, tmp, "a", env=RETENTION))
    procs[0].wait_owning({0, 1, 2})
    model = "m-" + uuid.uuid4().hex[:6]
    parent = submit("acme", uuid.uuid4().hex[:8], model=model)
    bus.send(parent)
    bus.wait_event(parent.job_id, ev.JobQueued)
    lease = bus.request_work("w-parent", model=model)
    assert isinstance(lease, ev.WorkAssigned) and lease.job_id == parent.job_id
    bus.send(c.CompleteJob(bus.next_id("done"), parent.job_id, lease.epoch, lease.worker_id, "k", "sha", 1))
    bus.wait_event(parent.job_id, ev.JobSucceeded)

    # Evicted about a second later: the job's key tombstoned in the changelog, its summary written.
    bus.wait_for(lambda: _evicted(settings, parent.job_id), 15, "the parent's eviction")

    # A re-sent submission is still a no-op; another request under the same key is still refused.
    bus.send(replace(parent, command_id="again"))
    bus.send(replace(parent, command_id="other", request_hash="h2"))
    refused = bus.wait_event(parent.job_id, ev.CommandRejected)
    assert refused.reason == "idempotency_key_reused" and refused.command_id == "other"
    assert len([e for e in bus.job_events(parent.job_id) if isinstance(e, ev.JobSubmitted)]) == 1

    # A child of the evicted parent learns "succeeded" and runs (an unknown parent would cancel it).
    child = submit("acme", uuid.uuid4().hex[:8], model=model + "-child", parents=(parent.job_id,))
    bus.send(child)
    assert bus.wait_event(child.job_id, ev.JobQueued).reason == "parents_resolved"
    assert [(e.parent_id, e.outcome) for e in bus.job_events(child.job_id)
            if isinstance(e, ev.ParentResolved)] == [(parent.job_id, "succeeded")]
    got = bus.request_work("w-child", model=model + "-child")
    assert isinstance(got, ev.WorkAssigned) and got.job_id == child.job_id

    # Anything else is refused as evicted; the events topic still holds (and replays) the whole history.
    bus.send(c.CancelJob("cancel-evicted", parent.job_id, "user"))
    assert bus.wait_event(parent.job_id, ev.CommandRejected, count=2).reason == "evicted"
    timeline = "\n".join(replay.timeline(settings, parent.job_id))
    for kind in ("JobSubmitted", "JobLeased", "JobSucceeded", "ParentWatched", "REJECTED CommandRejected"):
        assert kind in timeline

    # Restart with the group's commits rewound to the start: the new owner restores the table from the
    # changelog (tombstone and summary) and catch-up reads the parent's JobSubmitted again. It must not fold
    # it into a new state: the key stays tombstoned and a re-sent submission is still a no-op.
    procs[0].stop()
    p = partition_for(parent.job_id, settings.partitions)
    rewind_commits(settings, p, 0)
    procs.append(SchedulerProc(settings, tmp, "b", env=RETENTION))
    procs[1].wait_owning({0, 1, 2})
    bus.send(replace(parent, command_id="again-after-restart"))
    bus.send(c.CancelJob("cancel-evicted-2", parent.job_id, "user"))
    assert bus.wait_event(parent.job_id, ev.CommandRejected, count=3).command_id == "cancel-evicted-2"
    assert bus.job_events(parent.job_id)[-1].reason == "evicted"
    assert len([e for e in bus.job_events(parent.job_id) if isinstance(e, ev.JobSubmitted)]) == 1
    assert _evicted(settings, parent.job_id)
    # Never written again after its tombstone (a resurrected state would be evicted again a second later).
    own = [v for k, v in _changelog(settings, parent.job_id) if k == parent.job_id.encode()]
    assert own.index(None) == len(own) - 1, "the evicted job's state was written again"
    report = replay.rebuild(settings)
    assert report.ok, report.summary()
    assert report.evicted == 1
