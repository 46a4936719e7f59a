"""The capacity loop: read the pool, ask the policy, tell the provider; one JSON line per action."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from spotreel.services.capacity.metrics import CapacityMetrics
from spotreel.services.capacity.policy import CapacityConfig, Decision, FleetView, PoolView, decide
from spotreel.services.capacity.providers import Provider, Worker

log = logging.getLogger("spotreel.capacity")

# worker ids -> status in the workers read model ("idle", "busy", "gone"); absent = never leased yet
StatusLookup = Callable[[list[str]], dict[str, str]]


class Stats(Protocol):
    def poll(self, timeout: float = 0.5) -> int: ...
    def view(self, pool: str) -> PoolView: ...


def classify(workers: list[Worker], statuses: dict[str, str], now: float, cold_start_s: float) -> FleetView:
    idle, busy, starting, draining = [], [], [], []
    for w in sorted(workers, key=lambda w: w.started_at):
        status = statuses.get(w.worker_id)
        if w.draining:
            draining.append(w.worker_id)
        elif status == "busy":
            busy.append(w.worker_id)
        elif status is None and now - w.started_at < cold_start_s:
            starting.append(w.worker_id)  # still loading its model; has not asked for work yet
        else:
            idle.append(w.worker_id)
    return FleetView(tuple(idle), tuple(busy), tuple(starting), tuple(draining))


@dataclass
class Manager:
    pool: str
    cfg: CapacityConfig
    stats: Stats
    provider: Provider
    statuses: StatusLookup
    cold_start_s: float = 60.0
    clock: Callable[[], float] = time.time
    emit: Callable[[dict], None] = field(default=lambda rec: print(json.dumps(rec), flush=True))
    last_up: float | None = None
    last_down: float | None = None
    added: int = 0
    drained: int = 0
    preempted: int = 0
    metrics: CapacityMetrics = field(default_factory=CapacityMetrics)

    def tick(self) -> Decision:
        self.stats.poll(0.2)
        for wid in self.provider.notices():
            # A preemption notice: drain now, so the job is checkpointed and released while there is time.
            self.provider.drain(wid)
            self.preempted += 1
            self.metrics.decisions.labels(self.pool, "preemption_notice").inc()
            self.emit({"at": self.clock(), "pool": self.pool, "action": "preemption_notice", "worker": wid})
        workers = self.provider.workers()
        live = [w.worker_id for w in workers if not w.draining]
        statuses = self.statuses(live) if live else {}
        view = self.stats.view(self.pool)
        observe = getattr(self.provider, "observe_pool", None)
        if callable(observe):  # a provider that prices its choices by the pool's measured run time
            observe(view)
        # The clock is read after the fleet and the queue: an action is stamped no earlier than the state it
        # was decided on (read at the tick's start, a drain could look as if it hit a worker still busy then).
        now = self.clock()
        fleet = classify(workers, statuses, now, self.cold_start_s)
        self.metrics.observe_drains(self.pool, fleet.draining, {w.worker_id for w in workers}, now)
        d = decide(view, fleet, self.cfg, now, self.last_up, self.last_down)
        self.metrics.observe(self.pool, d, fleet)
        if d.add:
            started = self.provider.add(d.add)
            self.last_up = now
            self.added += len(started)
            self.metrics.workers_changed.labels(self.pool, "added").inc(len(started))
            self.emit({"at": now, "pool": self.pool, "action": "add", "workers": started, "want": d.want,
                       "queued": view.queued, "busy": view.leased,
                       "loss_rate_per_hour": round(view.loss_rate_per_hour, 2), "reason": d.reason})
        for wid in d.drain:
            self.provider.drain(wid)
            self.metrics.drain_started(wid, now)
        if d.drain:
            self.last_down = now
            self.drained += len(d.drain)
            self.metrics.workers_changed.labels(self.pool, "drained").inc(len(d.drain))
            self.emit({"at": now, "pool": self.pool, "action": "drain", "workers": list(d.drain),
                       "want": d.want, "reason": d.reason})
        return d

    def run(self, interval_s: float, stop: Callable[[], bool]) -> None:
        while not stop():
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - a failed tick (broker blip, read timeout) is retried next tick
                log.exception("capacity tick failed")
            time.sleep(interval_s)
