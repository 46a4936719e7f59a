"""Prometheus metrics of one scheduler process, on their own registry (no module globals), served on
127.0.0.1 only when a port is given."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, start_http_server

from spotreel.domain.events import LeaseExpired
from spotreel.domain.state import JobState

# Counters' and histograms' `_created` timestamps would come out as separate gauge families.
disable_created_metrics()


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.queue_depth = Gauge("spotreel_scheduler_queue_depth", "queued jobs", ["pool", "partition"], registry=r)
        self.dispatch_latency = Histogram(
            "spotreel_scheduler_dispatch_seconds", "RequestWork produced -> answer sent", registry=r,
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5))
        self.lease_expirations = Counter(
            "spotreel_scheduler_lease_expirations",
            "leases expired, by cause: worker_lost (counted as a preemption) or confirm_timeout (a lease held only "
            "to confirm a cancel or pause)", ["pool", "cause"], registry=r)
        self.rejections = Counter("spotreel_scheduler_rejections", "commands rejected", ["reason"], registry=r)
        self.deadletters = Counter("spotreel_scheduler_deadletters", "poison commands", ["reason"], registry=r)
        self.commands = Counter("spotreel_scheduler_commands", "commands processed", registry=r)
        self.renewals_absorbed = Counter("spotreel_scheduler_renewals_absorbed",
                                         "renewals answered on the replies topic without an event", registry=r)
        self.skipped = Counter("spotreel_scheduler_redelivered_skipped", "already-applied commands", registry=r)
        self.queue_wait = Histogram(
            "spotreel_scheduler_queue_wait_seconds", "first lease of a job: submitted (or run_at) -> granted",
            ["pool", "tier"], registry=r,
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800))
        self.lag = Gauge("spotreel_scheduler_consumer_lag", "commands not yet read", ["partition"], registry=r)

    def observe_pickup(self, job: JobState, leased_at_ms: int) -> None:
        """Queue wait of a job's first lease: submitted (or its run_at, when later) -> the grant."""
        since = max(job.submitted_at_ms, job.run_at_ms or 0)
        self.queue_wait.labels(job.pool, str(job.priority)).observe(max(0, leased_at_ms - since) / 1000)

    def observe_expiry(self, before: JobState | None, expired: LeaseExpired) -> None:
        lost = before is None or expired.preemptions > before.preemptions
        pool = before.pool if before is not None else ""
        self.lease_expirations.labels(pool, "worker_lost" if lost else "confirm_timeout").inc()

    def serve(self, port: int) -> None:
        start_http_server(port, addr="127.0.0.1", registry=self.registry)
