"""The capacity manager's Prometheus metrics: every decision it takes (including the ticks where it holds),
the workers it added and drained, and what it saw (demand and the fleet by condition). One registry per
manager, served on 127.0.0.1 only when `spotreel capacity --metrics-port` is given."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, start_http_server

from spotreel.services.capacity.policy import Decision, FleetView

# Counters' `_created` timestamps would come out as separate gauge families.
disable_created_metrics()


def action_of(d: Decision) -> str:
    """A bounded label for a decision (its `reason` carries numbers and is for the log line only)."""
    if d.add:
        return "add"
    if d.drain:
        return "drain"
    for prefix, action in (("scale-up cooling", "up_cooldown"), ("scale-down cooling", "down_cooldown"),
                           ("surplus is busy", "surplus_busy")):
        if d.reason.startswith(prefix):
            return action
    return "steady"


class CapacityMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.decisions = Counter(
            "spotreel_capacity_decisions", "decisions, one per tick (add, drain, steady, up_cooldown, "
            "down_cooldown, surplus_busy), and preemption_notice per worker drained on a notice",
            ["pool", "action"], registry=r)
        self.workers_changed = Counter("spotreel_capacity_workers_changed", "workers added or drained",
                                       ["pool", "change"], registry=r)
        self.desired = Gauge("spotreel_capacity_desired_workers", "the policy's demand for the pool", ["pool"],
                             registry=r)
        self.fleet = Gauge("spotreel_capacity_workers", "the provider's workers by condition", ["pool", "state"],
                           registry=r)
        self.drain = Histogram(
            "spotreel_capacity_drain_seconds", "a drained worker: first seen draining -> gone from the provider "
            "(its emergency checkpoint and release, then its exit), to the manager's tick", ["pool"], registry=r,
            buckets=(1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600))
        self.launch_errors = Counter(
            "spotreel_capacity_launch_errors", "errors a cloud provider answered a launch with (EC2: "
            "InsufficientInstanceCapacity, MaxSpotInstanceCountExceeded, RequestLimitExceeded, ...), by code; each "
            "backs its placement off", ["pool", "code"], registry=r)
        self.cost_per_video = Gauge(
            "spotreel_capacity_cost_per_video_dollars", "expected cost of one video on an instance type in a zone: "
            "spot price x (GPU time + work redone per expected interruption)", ["pool", "instance_type", "zone"],
            registry=r)
        self._draining_since: dict[str, float] = {}

    def drain_started(self, worker_id: str, now: float) -> None:
        self._draining_since.setdefault(worker_id, now)

    def observe_drains(self, pool: str, draining: tuple[str, ...], live: set[str], now: float) -> None:
        """Start the clock of each worker seen draining (a notice, a drain by someone else); stop it once the
        worker is gone from the provider."""
        for wid in draining:
            self.drain_started(wid, now)
        for wid in [w for w in self._draining_since if w not in live]:
            self.drain.labels(pool).observe(max(0.0, now - self._draining_since.pop(wid)))

    def observe(self, pool: str, d: Decision, fleet: FleetView) -> None:
        self.decisions.labels(pool, action_of(d)).inc()
        self.desired.labels(pool).set(d.want)
        for state in ("idle", "busy", "starting", "draining"):
            self.fleet.labels(pool, state).set(len(getattr(fleet, state)))

    def serve(self, port: int, host: str = "127.0.0.1") -> tuple[Any, Any]:
        """(server, thread), for a caller that stops serving before its process ends (tests)."""
        return start_http_server(port, addr=host, registry=self.registry)
