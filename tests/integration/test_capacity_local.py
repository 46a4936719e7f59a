"""The capacity manager against a real scheduler's pool statistics (Kafka) and real local processes.

The processes here stand in for workers that never get a lease (real `spotreel worker` processes are
test_capacity_workers.py); what is under test, quickly, is sizing from the scheduler's published queue,
draining by SIGTERM, and preemption notices.
"""

from __future__ import annotations

import sys
import time
import uuid

import pytest

from spotreel.domain import commands as c
from spotreel.platform.processes import read_pidfile
from spotreel.services.capacity.manager import Manager
from spotreel.services.capacity.policy import CapacityConfig
from spotreel.services.capacity.providers import LocalProvider
from spotreel.services.capacity.stats import PoolStatsReader
from tests.integration.capacitykit import wait_until
from tests.integration.schedkit import POOL, Bus, SchedulerProc, drop_topics, make_topics, scheduler_settings, submit

pytestmark = pytest.mark.integration

# Exits 0 on SIGTERM, like a worker with nothing to checkpoint.
STAND_IN = [sys.executable, "-c",
            "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); time.sleep(600)"]


def test_fleet_follows_the_queue_and_preemption_notices(stack, tmp_path):
    settings = scheduler_settings("cap" + uuid.uuid4().hex[:8], partitions=2)
    make_topics(settings)
    bus = Bus(settings)
    sched = SchedulerProc(settings, tmp_path)
    provider = LocalProvider(POOL, tmp_path / "run", tmp_path / "logs", argv=STAND_IN)
    stats = PoolStatsReader(settings)
    actions: list[dict] = []
    cfg = CapacityConfig(floor=0, ceiling=2, idle_buffer=0, up_cooldown_s=0, down_cooldown_s=1)
    mgr = Manager(POOL, cfg, stats, provider, statuses=lambda ids: {}, cold_start_s=0.5, emit=actions.append)
    try:
        sched.wait_owning({0, 1})
        jobs = [submit("capco", f"{uuid.uuid4().hex[:6]}-{i}") for i in range(3)]
        for j in jobs:
            bus.send(j)
        wait_until(lambda: stats.poll(0.2) >= 0 and stats.view(POOL).queued == 3, what="3 queued in pool stats")

        d = mgr.tick()
        assert d.add == 2 and d.want == 2, d  # 3 queued, nothing measured: one each, capped by the ceiling
        assert len(provider.workers()) == 2
        pids = [read_pidfile(tmp_path / "run" / f"{w.worker_id}.pid") for w in provider.workers()]
        assert all(p is not None and p.alive() for p in pids)
        time.sleep(0.6)  # past the cold-start grace: both count as supply, so nothing more is added
        assert mgr.tick().add == 0

        for j in jobs:
            bus.send(c.CancelJob(f"cx-{j.job_id}", j.job_id, "user"))
        wait_until(lambda: stats.poll(0.2) >= 0 and stats.view(POOL).queued == 0, what="an empty queue")
        time.sleep(1.0)  # the scale-down cooldown after the scale-up
        d = mgr.tick()
        assert len(d.drain) == 2, d
        wait_until(lambda: provider.workers() == [], 30, what="drained workers to exit on SIGTERM")
        assert all(not p.alive() for p in pids)

        # A preemption notice for a worker: drained at once, then replaced while the floor asks for one.
        floor_cfg = CapacityConfig(floor=1, ceiling=2, idle_buffer=0, up_cooldown_s=0, down_cooldown_s=600)
        mgr.cfg = floor_cfg
        mgr.last_up = mgr.last_down = None
        assert mgr.tick().add == 1
        [doomed] = provider.workers()
        (tmp_path / "run" / "notices" / doomed.worker_id).write_text("2 minutes")
        d = mgr.tick()
        assert d.add == 1, "a draining worker is not supply: its replacement starts in the same tick"
        wait_until(lambda: all(w.worker_id != doomed.worker_id for w in provider.workers()), 30,
                   what="the preempted worker to stop")
        assert len(provider.workers()) == 1 and mgr.tick().add == 0
        kinds = [a["action"] for a in actions]
        assert kinds == ["add", "drain", "add", "preemption_notice", "add"], kinds
    finally:
        provider.close(5)
        stats.close()
        bus.close()
        sched.stop()
        drop_topics(settings)
