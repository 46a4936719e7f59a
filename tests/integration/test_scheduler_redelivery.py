"""Commands that Kafka redelivers because the scheduler died after processing them but before committing
their offsets: a granted RequestWork is answered again with the same lease (no second one), a refused one
is answered again, an applied command is not applied twice and a poison command is dead-lettered once.

The crash is made exact: the first scheduler is killed with kill -9 and the group's committed offset is
set back to the first RequestWork, so everything after it is redelivered to the second scheduler."""

from __future__ import annotations

import uuid

from spotreel.adapters.partitioning import partition_for
from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.domain import ids
from tests.integration.schedkit import (GPU, MODEL, Bus, SchedulerProc, drop_topics, make_topics, rewind_commits,
                                        scheduler_settings, submit)


def _key_on(partition: int, partitions: int, prefix: str) -> str:
    return next(f"{prefix}-{i}" for i in range(10_000)
                if partition_for(ids.job_id_for("acme", f"{prefix}-{i}"), partitions) == partition)


def _request(rid: str, worker: str) -> c.RequestWork:
    return c.RequestWork(rid, worker, GPU, (MODEL,), (), False, 30_000, 0)


def test_redelivered_commands_are_answered_again_and_applied_once(stack, tmp_path):
    settings = scheduler_settings("rd" + uuid.uuid4().hex[:10], partitions=3)
    make_topics(settings)
    bus = Bus(settings)
    procs = [SchedulerProc(settings, tmp_path, "first")]
    run = uuid.uuid4().hex[:6]
    try:
        procs[0].wait_owning({0, 1, 2})
        p = 1
        job = submit("acme", _key_on(p, 3, f"{run}-j"))
        bus.send(job, partition=p)
        bus.wait_event(job.job_id, ev.JobQueued, timeout=60)

        granted_rid, refused_rid = f"rw-grant-{run}", f"rw-none-{run}"
        first_offset = bus.send_at(_request(granted_rid, "w1"), p)
        granted = bus.wait_for(lambda: bus.answers.get(granted_rid), 60, "the grant")
        assert isinstance(granted, ev.WorkAssigned) and granted.job_id == job.job_id
        bus.send_at(_request(refused_rid, "w2"), p)  # nothing else is queued on p
        refused = bus.wait_for(lambda: bus.answers.get(refused_rid), 60, "the refusal")
        assert isinstance(refused, ev.NoWorkAvailable)
        later = submit("acme", _key_on(p, 3, f"{run}-k"))
        bus.send(later, partition=p)
        bus.wait_event(later.job_id, ev.JobQueued, timeout=60)
        poison_offset = bus.send_raw(b"junk", b"\x00not avro at all", p)
        first_dead = bus.wait_for(lambda: [d for d in bus.deadletters() if d["source_offset"] == poison_offset],
                                  60, "the poison's dead letter")
        assert len(first_dead) == 1

        procs[0].kill9()
        rewind_commits(settings, p, first_offset)
        procs.append(SchedulerProc(settings, tmp_path, "second"))
        procs[1].wait_owning({0, 1, 2}, timeout=90)
        # A command sent after the restart: once its rejection is out, everything before it on p was handled.
        ghost = next(g for i in range(10_000) if partition_for(g := f"jghost{run}{i}", 3) == p)
        bus.send(c.CancelJob(f"cx-{ghost}", ghost, "user"), partition=p)
        bus.wait_for(lambda: any(isinstance(e, ev.CommandRejected) and e.job_id == ghost for e in bus.events),
                     90, "the sentinel's rejection")
        bus.wait_for(lambda: sum(a.request_id == refused_rid for a in bus.answer_log) >= 2, 30, "the 2nd refusal")
        bus.poll(1.0)

        grants = [a for a in bus.answer_log if a.request_id == granted_rid]
        assert grants == [granted, granted], grants  # the same lease, answered twice
        refusals = [a for a in bus.answer_log if a.request_id == refused_rid]
        assert [(type(a), a.reason) for a in refusals] == [(ev.NoWorkAvailable, refused.reason)] * 2
        leased = [e for e in bus.events if isinstance(e, ev.JobLeased)]
        assert [(e.job_id, e.epoch) for e in leased] == [(job.job_id, 1)], "a second lease was granted"
        assert [type(e).__name__ for e in bus.job_events(later.job_id)] == ["JobSubmitted", "JobQueued"]
        dead = [d for d in bus.deadletters() if d["source_offset"] == poison_offset]
        assert len(dead) == 1, f"the poison command was dead-lettered {len(dead)} times"
        assert "redelivery window: 1 grants, 1 dead letters" in procs[1].log()
    except BaseException:
        for proc in procs:
            print(f"----- tail of {proc.log_path.name} -----\n{proc.log()[-5000:]}")
        raise
    finally:
        for proc in procs:
            proc.stop()
        bus.close()
        drop_topics(settings)
