"""The capacity manager with the `simulated` provider against a real private control plane: a burst of
jobs makes it grow a fleet of simulated workers to a few dozen (within the ceiling), machines die after
exponential lifetimes and every death is announced a few seconds ahead, the manager drains the announced
ones so their jobs are checkpointed, released and resumed elsewhere, every job succeeds exactly once, and
once the queue is empty the fleet shrinks to its warm buffer by draining idle workers only.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest

from spotreel.domain import events as ev
from spotreel.platform.cql import cql_session
from spotreel.services.capacity.manager import Manager
from spotreel.services.capacity.policy import CapacityConfig
from spotreel.services.capacity.provider_sim import SimulatedProvider
from spotreel.fleetsim.config import SimConfig
from spotreel.services.capacity.stats import PoolStatsReader
from spotreel.services.capacity.workers import status_lookup
from tests.integration.capacitykit import held_at, leases, private_plane
from tests.integration.schedkit import Bus, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

GPU = "sim-gpu"
JOBS, STEPS = 120, 10
CFG = CapacityConfig(floor=2, ceiling=40, idle_buffer=2, target_wait_s=6.0, up_cooldown_s=1.0,
                     down_cooldown_s=8.0, max_step_up=16)
# 0.2 s steps: a job is about 2 s of compute. Lifetimes average a minute, so a few dozen machines lose
# several of their number during the run; each loss is announced 4 s ahead.
SIM = SimConfig(step_s=0.2, checkpoint_cost_s=0.05, policy="fixed", fixed_interval_s=1.0, mtbf_s=60.0,
                notice_share=1.0, cold_start_s=1.0, lease_wait_s=2.0, seed=7)
NOTICE_LEAD_S = 4.0


@pytest.fixture
def plane(settings, stack):
    yield from private_plane(settings)


def test_a_simulated_fleet_follows_the_queue_and_drains_on_notice(plane):
    s = plane.settings
    pool = f"{plane.model}@{GPU}"
    provider = SimulatedProvider(pool, plane.url, plane.worker_key, SIM, notice_lead_s=NOTICE_LEAD_S)
    stats = PoolStatsReader(s)
    bus = Bus(s)
    actions: list[dict] = []
    samples: list[tuple[float, int, int]] = []  # (time, supply, draining)
    try:
        with cql_session(s, keyspace=s.cassandra_keyspace) as session:
            mgr = Manager(pool, CFG, stats, provider, status_lookup(session), cold_start_s=3.0,
                          emit=actions.append)

            def tick_until(pred, timeout, what):
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    mgr.tick()
                    ws = provider.workers()
                    draining = sum(w.draining for w in ws)
                    samples.append((time.time(), len(ws) - draining, draining))
                    bus.poll(0.3)
                    if pred():
                        return
                raise AssertionError(f"timed out after {timeout} s waiting for {what}; "
                                     f"actions {actions[-5:]}, provider {provider.summary()}")

            tick_until(lambda: len(provider.workers()) == 2, 20, "the floor")
            assert actions[0]["action"] == "add" and len(actions[0]["workers"]) == 2

            jobs = [submit("acme", f"sim-{uuid.uuid4().hex[:6]}-{i}", model=plane.model, gpu_type=GPU,
                           num_steps=STEPS) for i in range(JOBS)]
            submitted = time.time()
            for j in jobs:
                bus.send(j)

            def succeeded() -> set[str]:
                return {e.job_id for e in bus.events if isinstance(e, ev.JobSucceeded)}

            tick_until(lambda: len(succeeded()) == JOBS, 150, f"{JOBS} jobs to succeed")
            all_done = time.time()
            tick_until(lambda: [w.draining for w in provider.workers()] == [False, False], 60,
                       "the fleet to shrink to its idle buffer")
            shrunk = time.time()
            bus.poll(1.0)
            # Machines go on dying while the test ends: every notice announced by now is handled by one more
            # tick (counts taken a moment apart can differ by the notices of that moment).
            announced = provider.summary()["notices"]
            mgr.tick()
    finally:
        summary = provider.summary()
        attempts = provider.attempts()
        provider.close()
        stats.close()
        bus.close()
    print(f"provider: {summary}")

    adds = [a for a in actions if a["action"] == "add"]
    drains = [a for a in actions if a["action"] == "drain"]
    notices = [a for a in actions if a["action"] == "preemption_notice"]
    first_up = next(a for a in adds if a["at"] >= submitted)
    peak_supply = max(n for _, n, _ in samples)
    peak_at = next(t for t, n, _ in samples if n == peak_supply)
    print(f"scale-up reaction {first_up['at'] - submitted:.1f} s, peak {peak_supply} workers "
          f"{peak_at - submitted:.1f} s after the burst, {JOBS} jobs in {all_done - submitted:.1f} s, "
          f"shrunk {shrunk - all_done:.1f} s after the last; adds {len(adds)} ({sum(len(a['workers']) for a in adds)} "
          f"workers), scale-down drains {sum(len(a['workers']) for a in drains)}, notices {len(notices)}")

    # Grew to a few dozen, never past the ceiling; reacted within a few ticks of the pool statistics.
    assert first_up["at"] - submitted < 10
    assert 24 <= peak_supply <= CFG.ceiling, peak_supply
    assert all(n <= CFG.ceiling for _, n, _ in samples)

    events = bus.events
    by_type = Counter(type(e).__name__ for e in events)
    done = Counter(e.job_id for e in events if isinstance(e, ev.JobSucceeded))
    assert set(done) == {j.job_id for j in jobs} and set(done.values()) == {1}, "each job succeeded once"
    assert not by_type["JobFailed"] and not by_type["JobDeadLettered"] and not by_type["AttemptFailed"]

    # Every announced death was drained in time: its job (if any) checkpointed and released, never expired.
    assert notices, "a minute's mean lifetime over a few dozen machines brings notices"
    assert announced <= len(notices) == mgr.preempted <= summary["notices"], (announced, summary)
    assert not by_type["LeaseExpired"], "no lease was left to expire"
    outcomes = summary["attempts_by_outcome"]
    assert not outcomes.get("vanished") and outcomes.get("completed", 0) >= JOBS
    noticed = {a["worker"] for a in notices}
    released = [e for e in events if isinstance(e, ev.LeaseReleased)]
    assert released, "some notice landed on a busy worker"
    for r in released:
        assert r.reason == "preempted" and r.worker_id in noticed, r
        later = [e for e in events if isinstance(e, ev.JobLeased) and e.job_id == r.job_id and e.epoch > r.epoch]
        assert later, f"{r.job_id} leased again after its release"
        # The newest checkpoint before that lease, of any epoch: a lease can be released (a second notice)
        # before it checkpoints, and the job then resumes from an earlier holder's checkpoint (CI saw it).
        ckpts = [c.step for c in events if isinstance(c, ev.CheckpointRecorded) and c.job_id == r.job_id
                 and c.version < later[0].version]
        assert (later[0].resume_step or 0) == (ckpts[-1] if ckpts else 0), "resumed from its last checkpoint"

    # Scale-down drained idle workers only: none held a lease when the manager decided.
    holds = leases(events)
    scaled_down = [(w, a["at"]) for a in drains for w in a["workers"]]
    assert scaled_down, "the fleet shrank by draining"
    for wid, at in scaled_down:
        assert not held_at(holds, wid, int(at * 1000)), f"{wid} held a lease when drained"
    handed_back = {a.worker_id for a in attempts if a.outcome == "drained"}
    assert handed_back <= noticed, "only workers with a notice handed a job back"
    assert summary["workers_ended"].get("drained", 0) >= len(scaled_down) + len(released)
