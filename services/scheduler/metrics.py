"""Prometheus metrics of one scheduler process, on their own registry (no module globals), served on
127.0.0.1 only when a port is given."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, start_http_server

from spotreel.domain.events import JobLeased, LeaseExpired, LeaseReleased
from spotreel.domain.leases import PREEMPTED_FOR
from spotreel.domain.state import JobState, Status

# Counters' and histograms' `_created` timestamps would come out as separate gauge families.
disable_created_metrics()

# Jobs preempted and not yet leased again, remembered for the recovery histogram; beyond this many (a pool
# with no workers at all) the oldest are forgotten rather than grow memory without bound.
MAX_AWAITING_RECOVERY = 100_000
# A job's terminal outcomes, as the job's status names them.
OUTCOMES = (Status.SUCCEEDED, Status.FAILED, Status.DEAD_LETTERED, Status.CANCELLED)


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
        self.out_of_order = Counter("spotreel_scheduler_out_of_order_refused",
                                    "commands that arrived past the next expected offset, refused and read again "
                                    "in order (ordering.py)", registry=r)
        self.holes_accepted = Counter("spotreel_scheduler_offset_holes_accepted",
                                      "holes in a commands partition taken as real after every rewind came back "
                                      "past them (ordering.py)", registry=r)
        self.recovery_nudges = Counter("spotreel_scheduler_recovery_nudges",
                                       "changelog partitions sought again after Faust's recovery read nothing from "
                                       "them for a while (recoverywatch.py)", registry=r)
        self.skipped = Counter("spotreel_scheduler_redelivered_skipped", "already-applied commands", registry=r)
        self.evicted = Counter("spotreel_scheduler_evicted", "terminal jobs evicted from the table after their "
                               "retention (kind=job), and their summaries forgotten (kind=summary)", ["kind"],
                               registry=r)
        self.queue_wait = Histogram(
            "spotreel_scheduler_queue_wait_seconds", "first lease of a job: submitted (or run_at) -> granted",
            ["pool", "tier"], registry=r,
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800))
        self.lag = Gauge("spotreel_scheduler_consumer_lag", "commands not yet read", ["partition"], registry=r)
        self.tenant_gpu_seconds = Gauge(
            "spotreel_scheduler_tenant_gpu_seconds", "GPU-seconds of a tenant's ended leases on a partition this "
            "process owns, without decay (from the job table; sum over partitions for the tenant's total)",
            ["tenant", "partition"], registry=r)
        self.tenant_wasted_gpu_seconds = Gauge(
            "spotreel_scheduler_tenant_wasted_gpu_seconds", "of those, GPU-seconds after a lease's newest checkpoint "
            "when it ended without success (work redone by a next lease, or lost with the job), per tenant and pool, "
            "without decay (JobState.wasted_ms, so a new owner exports the same figure)",
            ["tenant", "pool", "partition"], registry=r)
        # Preemptions are counted here, not by workers: a worker that vanishes cannot count its own loss.
        self.preemptions = Counter(
            "spotreel_scheduler_preemptions", "leases lost to preemption (the domain's count): lease_expired "
            "(the worker went silent) or released (it handed the lease back after a notice or drain)",
            ["pool", "cause"], registry=r)
        self.preempt_requests = Counter(
            "spotreel_scheduler_preemption_requests", "leases the scheduler asked back (PreemptLease), by pool and "
            "reason (preempted_for: higher-tier work waits in a full pool); each becomes a preemption with cause "
            "preempted_for when its holder releases", ["pool", "reason"], registry=r)
        self.lost_steps = Counter(
            "spotreel_scheduler_preempted_steps_lost", "steps the job had reported beyond its newest checkpoint "
            "when a lease was preempted (work to redo; a lower bound, progress is reported every few seconds)",
            ["pool"], registry=r)
        self.recovery = Histogram(
            "spotreel_scheduler_preemption_recovery_seconds", "a preempted job: preemption -> its next lease granted "
            "(seen by the owner that saw both; a change of owner in between loses the observation)",
            ["pool"], registry=r, buckets=(0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800))
        self.completion = Histogram(
            "spotreel_scheduler_completion_seconds", "a succeeded job: submitted (or run_at) -> JobSucceeded",
            ["pool", "tier"], registry=r,
            buckets=(1, 5, 10, 30, 60, 120, 180, 300, 600, 1200, 1800, 3600, 7200))
        self.generation = Histogram(
            "spotreel_scheduler_generation_seconds", "a succeeded job's rendering time, summed over its leases",
            ["pool"], registry=r, buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 3600))
        # Counted where the terminal event is decided (pipeline._take), by the partition's owner, so once per
        # job: a redelivered command is skipped, a rebuild or a new owner folds the events without deciding
        # them again, and the projector, which reads every event again on a replay, counts nothing.
        self.jobs_ended = Counter(
            "spotreel_scheduler_jobs_ended", "jobs that reached a terminal state, by outcome (succeeded, failed, "
            "dead_lettered, cancelled), pool and tenant; counted when the partition's owner decides it (a job an "
            "operator requeues after it failed counts again when it ends again)", ["pool", "tenant", "outcome"],
            registry=r)
        self._outcome_series: set[tuple[str, str]] = set()
        self._preempted_at: dict[str, tuple[str, int]] = {}  # job id -> (pool, at_ms)

    def observe_pickup(self, job: JobState, leased_at_ms: int) -> None:
        """Queue wait of a job's first lease: submitted (or its run_at, when later) -> the grant."""
        since = max(job.submitted_at_ms, job.run_at_ms or 0)
        self.queue_wait.labels(job.pool, str(job.priority)).observe(max(0, leased_at_ms - since) / 1000)

    def observe_expiry(self, before: JobState | None, expired: LeaseExpired) -> None:
        lost = before is None or expired.preemptions > before.preemptions
        pool = before.pool if before is not None else ""
        self.lease_expirations.labels(pool, "worker_lost" if lost else "confirm_timeout").inc()

    def observe_lease_end(self, before: JobState | None, ended: LeaseExpired | LeaseReleased) -> None:
        """A preemption is what the domain counted as one (not a confirmed cancel or pause, not unclaimed), or a
        lease handed back because the scheduler asked for it (cause `preempted_for`; the domain does not charge
        it to the job's preemption budget)."""
        yielded = isinstance(ended, LeaseReleased) and ended.reason == PREEMPTED_FOR
        if before is None or (ended.preemptions <= before.preemptions and not yielded):
            return
        cause = "lease_expired" if isinstance(ended, LeaseExpired) else (PREEMPTED_FOR if yielded else "released")
        self.preemptions.labels(before.pool, cause).inc()
        durable = max((c.step for c in before.checkpoints), default=0)
        self.lost_steps.labels(before.pool).inc(max(0, before.step - durable))
        if len(self._preempted_at) >= MAX_AWAITING_RECOVERY:
            self._preempted_at.pop(next(iter(self._preempted_at)))
        self._preempted_at[ended.job_id] = (before.pool, ended.at_ms)

    def observe_lease(self, before: JobState | None, leased: JobLeased) -> None:
        """Pickup on a job's first lease (epoch 0 before it: `attempt` stays 1 across preemptions, so it cannot
        tell), recovery on the first lease after a preemption."""
        if before is not None and before.epoch == 0:
            self.observe_pickup(before, leased.at_ms)
        since = self._preempted_at.pop(leased.job_id, None)
        if since is not None:
            self.recovery.labels(since[0]).observe(max(0, leased.at_ms - since[1]) / 1000)

    def observe_success(self, job: JobState, at_ms: int) -> None:
        since = max(job.submitted_at_ms, job.run_at_ms or 0)
        self.completion.labels(job.pool, str(job.priority)).observe(max(0, at_ms - since) / 1000)
        self.generation.labels(job.pool).observe(job.render_ms / 1000)

    def observe_job(self, before: JobState | None, after: JobState) -> None:
        """One job's new state as decided. Its (pool, tenant) series of every outcome exist at 0 from the first
        state seen, so that a first failure is an increase to rate()/increase() and not a series born at 1."""
        key = (after.pool, after.tenant)
        if key not in self._outcome_series and not after.evicted:
            self._outcome_series.add(key)
            for outcome in OUTCOMES:
                self.jobs_ended.labels(after.pool, after.tenant, outcome)
        if after.is_terminal and not after.evicted and (before is None or not before.is_terminal):
            self.jobs_ended.labels(after.pool, after.tenant, after.status).inc()

    def forget(self, job_id: str) -> None:
        """The job ended: it will not be leased again."""
        self._preempted_at.pop(job_id, None)

    def serve(self, port: int) -> None:
        start_http_server(port, addr="127.0.0.1", registry=self.registry)
