"""Fair-share preemption on the real scheduler (SPOTREEL_PREEMPT_FAIR_SHARE_RATIO set): a tenant holding the
whole pool has one lease asked back (reason fair_share) when a newcomer queues work of the same tier; the
holder's release requeues its job (preempted_for, no attempt spent) and the freed worker's next request
gets the newcomer's job. Simulated workers (the test's Bus), one partition: about 15 s.
"""

from __future__ import annotations

import uuid

import pytest

from spotreel.domain import commands as c
from spotreel.domain import events as ev
from tests.integration.schedkit import Bus, SchedulerProc, drop_topics, make_topics, scheduler_settings, submit

pytestmark = pytest.mark.timeout(180)


def test_a_newcomer_gets_a_lease_of_the_tenant_holding_the_pool(stack, tmp_path):
    settings = scheduler_settings("fsp" + uuid.uuid4().hex[:10], partitions=1)
    make_topics(settings)
    bus = Bus(settings)
    proc = SchedulerProc(settings, tmp_path, env={"SPOTREEL_PREEMPT_MIN_RUN_S": "1",
                                                   "SPOTREEL_PREEMPT_FAIR_SHARE_RATIO": "2"})
    run = uuid.uuid4().hex[:6]
    try:
        proc.wait_owning({0})
        held = [submit("hog", f"{run}-{i}", priority=5) for i in range(2)]
        for s in held:
            bus.send(s)
        leases = {bus.request_work(f"w{i}", timeout=60).job_id: f"w{i}" for i in range(2)}
        assert set(leases) == {s.job_id for s in held}
        newcomer = submit("newco", f"{run}-new", priority=5)
        bus.send(newcomer)
        asked = bus.wait_for(lambda: next((e for s in held for e in bus.job_events(s.job_id)
                                           if isinstance(e, ev.PreemptRequested)), None), 30, "a PreemptRequested")
        assert asked.reason == "fair_share" and asked.epoch == 1
        worker = leases[asked.job_id]
        bus.send(c.ReleaseLease(bus.next_id(), asked.job_id, 1, worker, "paused"))
        requeued = bus.wait_event(asked.job_id, ev.JobRequeued, timeout=30)
        assert requeued.reason == "preempted_for"
        again = bus.request_work(worker, timeout=30)
        assert again.job_id == newcomer.job_id
        # Only one of the hog's two leases was asked back (one waiting job, the budget of two a minute).
        assert sum(isinstance(e, ev.PreemptRequested) for s in held for e in bus.job_events(s.job_id)) == 1
        released = [e for e in bus.job_events(asked.job_id) if isinstance(e, ev.LeaseReleased)]
        assert [(r.reason, r.preemptions) for r in released] == [("preempted_for", 0)]
    finally:
        proc.stop()
        bus.close()
        drop_topics(settings)
