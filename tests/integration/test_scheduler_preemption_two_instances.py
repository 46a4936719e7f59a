"""Priority preemption across two scheduler processes in one Faust group (partitions split between them).

Four partitions, two processes owning two each. Four simulated workers (the test's Bus) hold priority-1
leases, one on each partition. Then four priority-9 jobs are queued, all on the partitions of the process
that does not own partition 0. The owner of the lowest partition holding a lease that may be asked back
(partition 0's, preempting.py) is the one that decides: it learns of the waiting jobs only from the other
process's pool-stats records and asks its own leases back for them. Each asked lease is released (as a
worker draining would) and its worker asks the partition of a waiting priority-9 job, which it gets.

The budget (SPOTREEL_PREEMPT_PER_MINUTE=2 per pool) holds over both processes: exactly 2 of the 4 leases
are asked back within the test's 8 s. Before the one-decider rule each process asked 2 within 1.3-1.5 s, 4
in all (three runs). About 20 s.
"""

from __future__ import annotations

import time
import uuid

import pytest

from spotreel.adapters.partitioning import partition_for
from spotreel.domain import commands as c
from spotreel.domain import events as ev
from tests.integration.schedkit import GPU, MODEL, Bus, SchedulerProc, make_topics, scheduler_settings, submit, \
    teardown
from tests.integration.test_scheduler_fair_share import _wait_split

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

PARTS = 4
BUDGET = 2


def _on(tenant: str, run: str, partitions: set[int], n: int, priority: int) -> list:
    out, i = [], 0
    while len(out) < n:
        job = submit(tenant, f"{run}-{priority}-{i}", priority=priority)
        i += 1
        if partition_for(job.job_id, PARTS) in partitions:
            out.append(job)
    return out


def _ask(bus: Bus, worker: str, partition: int, timeout: float = 20.0):
    """One RequestWork to `partition`: its answer (WorkAssigned or NoWorkAvailable)."""
    rid = bus.next_id(f"rw-{worker}")
    bus.send(c.RequestWork(rid, worker, GPU, (MODEL,), (), False, 30_000, int(time.time() * 1000)), partition=partition)
    return bus.wait_for(lambda: bus.answers.get(rid), timeout, f"an answer to {rid}")


def test_a_priority_9_job_on_one_process_preempts_a_lease_of_the_other(stack, tmp_path):
    settings = scheduler_settings("p2" + uuid.uuid4().hex[:10], partitions=PARTS)
    make_topics(settings)
    env = {"SPOTREEL_PREEMPT_MIN_RUN_S": "1", "SPOTREEL_PREEMPT_PER_MINUTE": str(BUDGET)}
    procs = [SchedulerProc(settings, tmp_path, name, env=env) for name in ("first", "second")]
    bus = Bus(settings)
    run = uuid.uuid4().hex[:6]
    with teardown(settings, procs, bus):
        _wait_split(procs)
        owned = [procs[0].wait_owning(), procs[1].wait_owning()]
        deciding = 0 if 0 in owned[0] else 1  # owns partition 0, the lowest holding a lease to ask back
        low = [job for p in range(PARTS) for job in _on("t1", run, {p}, 1, 1)]
        for job in low:
            bus.send(job)
        holder = {}
        for i, job in enumerate(low):
            answer = _ask(bus, f"w{i}", partition_for(job.job_id, PARTS))
            assert isinstance(answer, ev.WorkAssigned) and answer.job_id == job.job_id, answer
            holder[job.job_id] = (f"w{i}", answer.epoch)
        time.sleep(1.5)  # past the minimum run (1 s)
        high = _on("t9", run, owned[1 - deciding], 4, 9)
        queued_at = time.monotonic()
        for job in high:
            bus.send(job)

        asked: dict[str, ev.PreemptRequested] = {}
        served: list[str] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(asked) < len(low):
            bus.poll(0.2)
            for job in low:
                got = next((e for e in bus.job_events(job.job_id) if isinstance(e, ev.PreemptRequested)), None)
                if got is None or job.job_id in asked:
                    continue
                asked[job.job_id] = got
                worker, epoch = holder[job.job_id]
                bus.send(c.ReleaseLease(bus.next_id(), job.job_id, epoch, worker, "paused"))
                bus.wait_event(job.job_id, ev.JobRequeued, timeout=20)
                waiting = [h for h in high if h.job_id not in served]
                answer = _ask(bus, worker, partition_for(waiting[0].job_id, PARTS))
                for _ in range(20):
                    # The other process learns that the worker's lease ended from `<prefix>.worker-leases`, a
                    # batch or a stats tick later: until then it answers worker_holds_lease.
                    if getattr(answer, "reason", None) != "worker_holds_lease":
                        break
                    time.sleep(0.25)
                    answer = _ask(bus, worker, partition_for(waiting[0].job_id, PARTS))
                assert isinstance(answer, ev.WorkAssigned) and answer.job_id in {h.job_id for h in high}, answer
                served.append(answer.job_id)
            if len(asked) >= 2 and time.monotonic() - queued_at > 8:
                break  # several stats ticks after the first requests: what both processes were going to ask
        by_process = [sum(1 for j in asked if partition_for(j, PARTS) in o) for o in owned]
        print(f"partitions {owned}; asked back {len(asked)} lease(s) within {time.monotonic() - queued_at:.1f} s "
              f"(budget {BUDGET} a minute), by process {by_process}; served {len(served)}")
        # The deciding process asked its own leases back for the other process's priority-9 jobs.
        assert by_process[deciding] == len(asked) and by_process[1 - deciding] == 0
        assert all(a.for_priority == 9 and a.reason == "preempted_for" for a in asked.values())
        assert len(served) == len(asked)
        assert len(asked) == BUDGET  # the pool's budget, over both processes
