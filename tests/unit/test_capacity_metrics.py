"""The capacity manager's metrics: one decision counted per tick by a bounded action, workers added and
drained, demand and the fleet by condition, notices."""

from __future__ import annotations

from prometheus_client import generate_latest

from spotreel.services.capacity.manager import Manager
from spotreel.services.capacity.metrics import action_of
from spotreel.services.capacity.policy import CapacityConfig, Decision, PoolView
from spotreel.services.capacity.providers import Worker

POOL = "tiny-t2v@any"


class Queue:
    def __init__(self, queued: int) -> None:
        self.queued = queued

    def poll(self, timeout: float = 0.5) -> int:
        return 0

    def view(self, pool: str) -> PoolView:
        return PoolView(pool, queued=self.queued)


class Machines:
    """An in-memory provider: workers appear when added; a drained one is draining until `exit_drained`."""

    def __init__(self) -> None:
        self.live: dict[str, Worker] = {}
        self.pending_notices: list[str] = []

    def workers(self) -> list[Worker]:
        return list(self.live.values())

    def add(self, n: int) -> list[str]:
        ids = [f"w{len(self.live) + i}" for i in range(n)]
        self.live.update({w: Worker(w, started_at=0.0) for w in ids})
        return ids

    def drain(self, worker_id: str) -> None:
        if worker_id in self.live:
            self.live[worker_id] = Worker(worker_id, draining=True)

    def exit_drained(self) -> None:
        self.live = {w: m for w, m in self.live.items() if not m.draining}

    def notices(self) -> list[str]:
        out, self.pending_notices = self.pending_notices, []
        return out


def test_actions_are_bounded_labels() -> None:
    assert action_of(Decision(add=2, want=3, reason="demand 3 > supply 1 (queued 2, busy 0)")) == "add"
    assert action_of(Decision(drain=("w1",), want=0, reason="supply 1 > demand 0")) == "drain"
    assert action_of(Decision(want=2, reason="scale-up cooling down")) == "up_cooldown"
    assert action_of(Decision(want=0, reason="scale-down cooling down")) == "down_cooldown"
    assert action_of(Decision(want=0, reason="surplus is busy or about to be; waiting for it to go idle")) == "surplus_busy"
    assert action_of(Decision(want=1)) == "steady"


def test_each_tick_is_counted_with_demand_and_fleet() -> None:
    clock = iter(range(1000, 2000, 100))
    queue, machines = Queue(queued=3), Machines()
    mgr = Manager(POOL, CapacityConfig(ceiling=4, idle_buffer=0, down_cooldown_s=0), queue, machines,  # type: ignore[arg-type]
                  statuses=lambda ids: {w: "idle" for w in ids}, cold_start_s=0.0, clock=lambda: next(clock),
                  emit=lambda rec: None)
    mgr.tick()  # 3 queued, nobody: add 3
    queue.queued = 0
    machines.pending_notices = ["w0"]
    mgr.tick()  # w0's notice drains it; the 2 idle left are surplus: drained
    text = generate_latest(mgr.metrics.registry).decode()
    p = f'pool="{POOL}"'
    assert f'spotreel_capacity_decisions_total{{action="add",{p}}} 1.0' in text
    assert f'spotreel_capacity_decisions_total{{action="drain",{p}}} 1.0' in text
    assert f'spotreel_capacity_decisions_total{{action="preemption_notice",{p}}} 1.0' in text
    assert f'spotreel_capacity_workers_changed_total{{change="added",{p}}} 3.0' in text
    assert f'spotreel_capacity_workers_changed_total{{change="drained",{p}}} 2.0' in text
    assert f"spotreel_capacity_desired_workers{{{p}}} 0.0" in text
    assert f'spotreel_capacity_workers{{{p},state="idle"}} 2.0' in text  # as seen before the drain
    machines.exit_drained()
    mgr.tick()  # the three drained workers are gone
    text = generate_latest(mgr.metrics.registry).decode()
    assert f"spotreel_capacity_drain_seconds_count{{{p}}} 3.0" in text
    # w0 drained on its notice at the second tick (1100), w1 and w2 by the policy then: all gone at 1200.
    assert f"spotreel_capacity_drain_seconds_sum{{{p}}} 300.0" in text
