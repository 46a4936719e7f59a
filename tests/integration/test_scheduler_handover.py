"""Two scheduler instances sharing the partitions: start a second, stop the first. Still one writer per
job, no lease granted twice, and the lease timers armed by the first are fired by the second."""

from __future__ import annotations

import time
import uuid
from collections import Counter

from spotreel.domain import events as ev
from tests.integration.schedkit import Bus, SchedulerProc, drop_topics, make_topics, scheduler_settings, submit

TTL_MS = 15_000


def test_handover_keeps_one_writer_and_moves_timers(stack, tmp_path):
    settings = scheduler_settings("h" + uuid.uuid4().hex[:10], partitions=4)
    make_topics(settings)
    bus = Bus(settings)
    model = "m-" + uuid.uuid4().hex[:6]
    a = SchedulerProc(settings, tmp_path, "a")
    b = None
    try:
        a.wait_owning({0, 1, 2, 3})
        subs = [submit("acme", f"h{i}", model=model) for i in range(8)]
        for s in subs:
            bus.send(s)
        for s in subs:
            bus.wait_event(s.job_id, ev.JobQueued)
        first = [bus.request_work(f"w{i}", model=model, ttl_ms=TTL_MS) for i in range(4)]
        assert all(isinstance(x, ev.WorkAssigned) for x in first), first
        leased_at = time.time()

        mark = len(a.log())
        b = SchedulerProc(settings, tmp_path, "b")
        owned_b = b.wait_owning(timeout=60)
        owned_a = a.wait_owning(timeout=60, after=mark)
        assert owned_a and owned_b and not owned_a & owned_b
        # Dispatch while both run: each request is answered by the one owner of its partition.
        during = [bus.request_work(f"w{i}", model=model, ttl_ms=TTL_MS) for i in range(4, 6)]
        a.stop()
        a_stopped_ms = int(time.time() * 1000)
        b.wait_owning({0, 1, 2, 3}, timeout=60, after=0)
        assert time.time() - leased_at < TTL_MS / 1000, "handover took longer than the lease; make TTL longer"
        # The first leases expire on B's clock, from timers B rebuilt from the table.
        for x in first:
            expired = bus.wait_event(x.job_id, ev.LeaseExpired, timeout=TTL_MS / 1000 + 15)
            assert expired.at_ms >= a_stopped_ms
        after = [bus.request_work(f"w{i}", model=model, ttl_ms=TTL_MS) for i in range(6, 12)]
        granted = [x for x in (*first, *during, *after) if isinstance(x, ev.WorkAssigned)]
        assert len(granted) == 12

        bus.poll(1.0)
        leases = [e for e in bus.events if isinstance(e, ev.JobLeased)]
        assert len(leases) == 12
        assert not [k for k, n in Counter((e.job_id, e.epoch) for e in leases).items() if n > 1]
        assert {(x.job_id, x.epoch) for x in granted} == {(e.job_id, e.epoch) for e in leases}
        for s in subs:
            accepted = [e for e in bus.job_events(s.job_id) if not isinstance(e, ev.CommandRejected)]
            assert [e.version for e in accepted] == list(range(1, len(accepted) + 1)), s.job_id
            # Never two live leases: every lease after the first follows an expiry of the one before.
            kinds = [type(e).__name__ for e in accepted]
            for i, k in enumerate(kinds):
                if k == "JobLeased" and "JobLeased" in kinds[:i]:
                    prev = max(j for j in range(i) if kinds[j] == "JobLeased")
                    assert "LeaseExpired" in kinds[prev:i] or "LeaseReleased" in kinds[prev:i], kinds
    finally:
        a.stop()
        if b is not None:
            b.stop()
        bus.close()
        drop_topics(settings)
