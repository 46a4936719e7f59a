"""What a scheduler instance keeps in memory for one partition it owns, derived from the job table and
rebuilt on every assignment: the dispatch index, the timer heap, tenant in-flight counts and the workers
it has heard from. None of it is authoritative: `decide` judges every transition against the table."""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from spotreel.domain.job_choice import DispatchIndex, QueuedJob
from spotreel.domain.events import ProgressReported, WorkerLeaseHeld
from spotreel.domain.fairness import TenantUsage
from spotreel.domain.preemption import Running
from spotreel.domain.renewals import Pending, Renewal, after_answer, moves, with_pending, with_renewal
from spotreel.domain.state import JobState, Status
from spotreel.domain.schedules import ScheduleState
from spotreel.domain.timers import Timer, TimerKind, schedule_timers, timers_for

from spotreel.services.scheduler.eviction import Evictions
from spotreel.services.scheduler.fairshare import DEFAULT_EST_MS, TenantLedger
from spotreel.services.scheduler.intake import GatewayIntake
from spotreel.services.scheduler.workerroll import WORKER_WINDOW_MS, WorkerRoll, WorkerSeen

__all__ = ["WORKER_WINDOW_MS", "PartitionState", "WorkerSeen"]


@dataclass
class PartitionState:
    partition: int
    # Commands at or below this offset already produced their events (read back from the events topic on
    # assignment): a redelivered one is skipped, which is what makes the loop exactly-once.
    applied_upto: int = -1
    # Of the command at `applied_upto`, a RenewalBatch whose events landed only in part before a crash: its
    # renewals up to this place are applied, the rest are not (catchup.py). None: the whole command is.
    applied_entry: int | None = None
    # Offset on the events topic that the table reflects (the table's own marker, see handler.py).
    events_offset: int = -1
    index: DispatchIndex = field(default_factory=DispatchIndex)
    # Entries are (due, kind, key, epoch, seq, timer): a total order on plain values, so two timers due at
    # the same millisecond never compare Timer objects; `seq` (unique) breaks the last tie by arrival.
    heap: list[tuple[int, str, str, int, int, Timer]] = field(default_factory=list)
    # Lease-expiry timers that are due by the clock but not yet by the log: the renewals that could have
    # moved their deadline may still be unread (see `due`). Same entries as `heap`.
    held: list[tuple[int, str, str, int, int, Timer]] = field(default_factory=list)
    # The newest broker append time (ms) among the commands read on this partition; -1 until one is read.
    log_ms: int = -1
    # The highest commands offset read (applied or skipped), or known read by an earlier owner.
    read_upto: int = -1
    # Gateways' pulses and the gateway each worker last came through (intake.py), and the lease-expiry timers
    # due by the clock and the log but waiting for a gateway to vouch past them (same entries as `heap`).
    intake: GatewayIntake = field(default_factory=GatewayIntake)
    gateway_held: list[tuple[int, str, str, int, int, Timer]] = field(default_factory=list)
    # Rewinds to `read_upto + 1` since a command arrived past it (ordering.py), and when the last one was.
    rewinds: int = 0
    rewound_at_ms: int = -1
    _seq: itertools.count = field(default_factory=itertools.count, repr=False)
    armed: set[Timer] = field(default_factory=set)
    fired: dict[str, set[str]] = field(default_factory=dict)  # job_id -> timer command ids sent
    in_flight: Counter = field(default_factory=Counter)
    leased_by_pool: Counter = field(default_factory=Counter)
    leased_at: dict[str, int] = field(default_factory=dict)
    # The workers heard from, least recently heard first (every touch moves one to the end: `worker_asked`,
    # `seen_worker`), with their counts per pool kept as they change (workerroll.py); none older than
    # WORKER_WINDOW_MS once `forget_workers` ran. Read it; change it only through the methods below.
    workers: WorkerRoll = field(default_factory=WorkerRoll)
    run_ms: deque = field(default_factory=lambda: deque(maxlen=200))
    run_ms_by_pool: dict[str, deque] = field(default_factory=dict)
    checkpoint_ms_by_pool: dict[str, deque] = field(default_factory=dict)  # reported write times
    # Ended leases, oldest first: (pool, granted_at_ms, ended_at_ms, lost), for the loss rate (MTBF).
    ended_leases: deque = field(default_factory=lambda: deque(maxlen=5000))
    checkpoint_gaps_ms: deque = field(default_factory=lambda: deque(maxlen=200))
    last_checkpoint_ms: dict[str, int] = field(default_factory=dict)
    known_pools: set[str] = field(default_factory=set)  # published once: keep publishing (zeros)
    # Queued jobs per pool in the last published stats, and the pools a job was queued in since: a pool
    # that showed nothing queued, or has idle workers, gets its stats at once, not at the next tick (idle
    # workers wait for them).
    published_queued: dict[str, int] = field(default_factory=dict)
    freshly_queued: set[str] = field(default_factory=set)
    holders: dict[str, str] = field(default_factory=dict)  # job_id -> pool, while leased
    # pool -> job_id -> what preemption weighs of each held lease (kept as the jobs change, not rebuilt by a
    # walk of the table every stats tick)
    running: dict[str, dict[str, Running]] = field(default_factory=dict)
    workers_of: dict[str, str] = field(default_factory=dict)  # job_id -> worker, while leased
    # For the commands Kafka redelivers after a crash (redelivery.py): RequestWork id -> its JobLeased,
    # and the command offsets that already have a dead letter.
    grants: dict[str, Any] = field(default_factory=dict)
    deadlettered: set[int] = field(default_factory=set)
    # Deadlines of renewals answered but not persisted (domain/renewals.py): job_id -> (epoch, deadline).
    renewals: dict[str, Renewal] = field(default_factory=dict)
    # job_id -> (stored state, renewal, pending, the view of them): the last view built, handed out again while
    # all three are the very same objects (a renewal is judged against the view its previous one armed).
    _views: dict[str, tuple[JobState, Renewal | None, Pending | None, JobState]] = field(default_factory=dict,
                                                                                         repr=False)
    # The newest absorbed progress report that moved a job's position (domain/renewals.py): job_id ->
    # (stored version it was judged against, the report); written in front of the job's next event.
    pending: dict[str, Pending] = field(default_factory=dict)
    # Workers holding a lease of this partition (count of leases), and the grants and ends of leases not yet
    # published to `<prefix>.worker-leases` (workerleases.py); ReleaseLease ids sent for double grants.
    busy_workers: Counter = field(default_factory=Counter)
    lease_news: list[Any] = field(default_factory=list)
    double_released: set[str] = field(default_factory=set)
    # GPU-seconds per tenant on this partition, shared with the other partitions (fairshare.py).
    ledger: TenantLedger = field(default_factory=TenantLedger)
    # pool -> times (ms) of the PreemptLease requests sent for leases of this partition (preempting.py), and
    # worker -> when it released a lease of this partition for them (free until it takes its next lease).
    preempt_asked: dict[str, deque] = field(default_factory=dict)
    freed: dict[str, int] = field(default_factory=dict)
    # job_id -> pool of the held leases asked to yield (PreemptRequested) and not ended yet.
    yielding: dict[str, str] = field(default_factory=dict)
    # Terminal jobs and summaries by when they leave the table (eviction.py, domain/retention.py).
    evictions: Evictions = field(default_factory=Evictions)

    def __post_init__(self) -> None:
        self.ledger.est_ms = self.est_run_ms

    def est_run_ms(self, pool: str) -> float:
        """What a lease of `pool` is expected to run: the mean of the pool's recent successes here."""
        runs = self.run_ms_by_pool.get(pool)
        return sum(runs) / len(runs) if runs else DEFAULT_EST_MS

    def view(self, state: JobState | None) -> JobState | None:
        """The state commands are judged and timers armed against: the stored one with the deadline of its
        lease's newest absorbed renewal and the position of its newest absorbed progress."""
        if state is None:
            return state
        job_id = state.job_id
        renewal, pending = self.renewals.get(job_id), self.pending.get(job_id)
        if renewal is None and pending is None:
            return state
        last = self._views.get(job_id)
        if last is not None and last[0] is state and last[1] is renewal and last[2] is pending:
            return last[3]
        view = with_pending(with_renewal(state, renewal), pending)
        self._views[job_id] = (state, renewal, pending, view)
        return view

    def absorb(self, stored: JobState, renewal: Renewal, report: Any = None) -> None:
        """A renewal answered without an event: remember its deadline (and the position a progress report
        moved to) and arm the timers (expiry, stuck) at them."""
        if isinstance(report, ProgressReported) and moves(self.view(stored), report):  # no view for a heartbeat
            self.pending[stored.job_id] = (stored.version, report)
        self.renewals[stored.job_id] = renewal
        self._arm_timers(self.view(stored), self.fired.get(stored.job_id, ()))

    def answered(self, stored: JobState | None, epoch: int, sent_ms: int) -> None:
        """The grant of `stored`'s lease `epoch` was answered at `sent_ms` (its answer acknowledged by the
        broker): its holder could not renew before that, so the lease runs a full TTL from then
        (renewals.after_answer), remembered like an absorbed renewal."""
        grace = after_answer(self.view(stored), epoch, sent_ms)
        if grace is not None:
            self.absorb(stored, grace)

    def observe(self, before: JobState | None, after: JobState | None) -> None:
        """Keep the derived structures in line with one job's new state."""
        if after is None:
            return
        job_id = after.job_id
        self.evictions.observe(after)
        self.ledger.observe(before, after)
        if after.status == Status.QUEUED:
            if before is None or before.status != Status.QUEUED:
                self.freshly_queued.add(after.pool)
            self.index.add(QueuedJob(job_id, after.tenant, after.priority, after.spec.model, after.gpu_type,
                                     after.updated_at_ms if before is not None else after.submitted_at_ms,
                                     float(after.spec.num_steps)))
        else:
            self.index.discard(job_id)
        was_holding = job_id in self.holders
        holding = after.lease is not None and after.status in Status.HOLDING_LEASE
        if holding and not was_holding:
            self.holders[job_id] = after.pool
            self.workers_of[job_id] = after.lease.worker_id  # type: ignore[union-attr]
            self.in_flight[after.tenant] += 1
            self.leased_by_pool[after.pool] += 1
            self.leased_at[job_id] = after.lease.granted_at_ms  # type: ignore[union-attr]
            self.busy_workers[after.lease.worker_id] += 1  # type: ignore[union-attr]
            self.lease_news.append(WorkerLeaseHeld(after.lease.worker_id, job_id, after.lease.epoch,  # type: ignore[union-attr]
                                                   self.partition, after.lease.granted_at_ms))  # type: ignore[union-attr]
        elif was_holding and not holding:
            pool = self.holders.pop(job_id)
            self.running.get(pool, {}).pop(job_id, None)
            worker = self.workers_of.pop(job_id, None)
            if worker is not None:
                self.busy_workers[worker] -= 1
                if self.busy_workers[worker] <= 0:
                    del self.busy_workers[worker]
                ended = before.lease if before is not None and before.lease is not None else None
                self.lease_news.append(WorkerLeaseHeld(worker, job_id, ended.epoch if ended else after.epoch,
                                                       self.partition, ended.granted_at_ms if ended else 0,
                                                       held=False))
            self.in_flight[after.tenant] -= 1
            self.leased_by_pool[pool] -= 1
            started = self.leased_at.pop(job_id, None)
            if after.status == Status.SUCCEEDED and started is not None:
                self.run_ms.append(after.updated_at_ms - started)
                self.run_ms_by_pool.setdefault(pool, deque(maxlen=200)).append(after.updated_at_ms - started)
            if started is not None:
                lost = before is not None and after.preemptions > before.preemptions
                self.ended_leases.append((pool, started, after.updated_at_ms, lost))
        if before is not None and after.checkpoints and (not before.checkpoints
                                                         or before.checkpoints[-1] != after.checkpoints[-1]):
            prev = self.last_checkpoint_ms.get(job_id, self.leased_at.get(job_id))
            if prev is not None:
                self.checkpoint_gaps_ms.append(after.checkpoints[-1].at_ms - prev)
            self.last_checkpoint_ms[job_id] = after.checkpoints[-1].at_ms
        if after.is_terminal:
            self.last_checkpoint_ms.pop(job_id, None)
        if holding:
            lease = after.lease
            self.running.setdefault(self.holders[job_id], {})[job_id] = Running(
                job_id, lease.epoch, after.priority, lease.granted_at_ms,  # type: ignore[union-attr]
                asked=after.cancel_requested or after.pause_requested or after.preempt_requested,
                preempted_last=after.preempted_last, tenant=after.tenant)
        if holding and after.preempt_requested:
            self.yielding[job_id] = after.pool
        else:
            self.yielding.pop(job_id, None)
        if before is None or before.version != after.version:
            self.fired.pop(job_id, None)
        renewal = self.renewals.get(job_id)
        if renewal is not None and (after.lease is None or after.lease.epoch != renewal[0]):
            del self.renewals[job_id]  # that lease is over
        pending = self.pending.get(job_id)
        if pending is not None and pending[0] != after.version:
            del self.pending[job_id]  # written in front of this state's events, or superseded by them
        if job_id not in self.renewals and job_id not in self.pending:
            self._views.pop(job_id, None)
        self._arm_timers(self.view(after), self.fired.get(job_id, ()))

    def _arm_timers(self, state: JobState | None, sent) -> None:
        for timer in timers_for(state):
            # A fired timer whose command was refused leaves the state as it was: do not fire it again.
            if timer not in self.armed and timer.command().command_id not in sent:
                self.arm(timer)

    def arm(self, timer: Timer) -> None:
        self.armed.add(timer)
        epoch = -1 if timer.epoch is None else timer.epoch
        heapq.heappush(self.heap, (timer.at_ms, timer.kind, timer.key, epoch, next(self._seq), timer))

    def observe_checkpoint(self, pool: str, duration_ms: int | None) -> None:
        if duration_ms is not None and duration_ms >= 0:
            self.checkpoint_ms_by_pool.setdefault(pool, deque(maxlen=200)).append(duration_ms)

    def seen_worker(self, worker_id: str, now_ms: int, free: bool = False) -> None:
        """A heartbeat (renewal, progress, checkpoint) from a worker keeps it fresh without a RequestWork.
        `free`: the command ended the worker's own lease (its job completed or its attempt failed), so it
        holds nothing and counts as idle (pool stats, the ETA) until its next lease, without waiting for
        its next RequestWork, which its asking policy may hold back while no partition shows work."""
        self.workers.heard(worker_id, now_ms, free)

    def worker_asked(self, worker_id: str, seen: WorkerSeen) -> None:
        """A RequestWork: what the worker offers, as of now (moved to the end of `workers`)."""
        self.workers.asked(worker_id, seen)

    def worker_took_lease(self, worker_id: str) -> None:
        """A grant to the worker: it no longer counts as idle."""
        self.workers.took_lease(worker_id)

    def forget_workers(self, now_ms: int) -> int:
        """Drop the workers not heard from within WORKER_WINDOW_MS (from the front: least recently heard
        first); how many. Every reader looks no further back than that window."""
        return self.workers.forget(now_ms)

    def remember_grant(self, request_id: str, leased: Any, keep: int = 10_000) -> None:
        # Only the uncommitted tail (a commit interval's worth) can be redelivered: a bounded memory does.
        self.grants[request_id] = leased
        while len(self.grants) > keep:
            del self.grants[next(iter(self.grants))]

    def observe_schedule(self, before: ScheduleState | None, after: ScheduleState | None) -> None:
        """Occurrence timers share the heap with the job timers (keys in `fired` are prefixed "s:")."""
        if after is None:
            return
        fired_key = "s:" + after.schedule_id
        if before is None or before.version != after.version:
            self.fired.pop(fired_key, None)
        sent = self.fired.get(fired_key, ())
        for timer in schedule_timers(after):
            if timer not in self.armed and timer.command().command_id not in sent:
                self.arm(timer)

    def due(self, now_ms: int, current: callable, current_schedule: callable = lambda _: None,
            lease_horizon_ms: int | None = None) -> list[Timer]:
        """Timers due at `now_ms` that the job's (or schedule's) current state still wants (stale ones are
        dropped).

        `lease_horizon_ms`: how far the log has been read (the append time of the newest command applied),
        when the partition is behind. A lease-expiry timer past the clock but not past the horizon is held
        back: renewals appended before its deadline may be in the unread backlog, and an ExpireLease sent now
        would only be refused once they are read. Held timers cost nothing while the owner catches up and
        are released as the horizon passes them (or at once when the partition is caught up: None)."""
        horizon = now_ms if lease_horizon_ms is None else min(now_ms, lease_horizon_ms)
        ready = []
        while self.heap and self.heap[0][0] <= now_ms:
            entry = heapq.heappop(self.heap)
            if entry[1] == TimerKind.EXPIRE_LEASE and entry[0] > horizon:
                heapq.heappush(self.held, entry)
            else:
                ready.append(entry)
        while self.held and self.held[0][0] <= horizon:
            ready.append(heapq.heappop(self.held))
        if self.gateway_held or self.intake.gateways:
            ready = self._gateway_holds(ready, current, now_ms)
        ready.sort()
        out: list[Timer] = []
        for entry in ready:
            timer = entry[-1]
            key = timer.key
            self.armed.discard(timer)
            if timer.kind == TimerKind.FIRE_OCCURRENCE:
                wanted, fired_key = schedule_timers(current_schedule(key)), "s:" + key
            else:
                wanted, fired_key = timers_for(self.view(current(key))), key
            if timer in wanted:
                self.fired.setdefault(fired_key, set()).add(timer.command().command_id)
                out.append(timer)
        return out

    def _gateway_holds(self, ready: list, current: callable, now_ms: int) -> list:
        """`ready` less the lease expiries a gateway holds (intake.py), plus those it holds no more."""
        def held(entry: tuple) -> bool:
            if entry[1] != TimerKind.EXPIRE_LEASE:
                return False
            state = self.view(current(entry[2]))
            lease = state.lease if state is not None else None
            # A timer of an older deadline (the lease was renewed since: most due timers at a fleet's pace)
            # is not held: `due` drops it at once instead of judging it again every tick.
            return (lease is not None and lease.epoch == entry[3] and lease.expires_at_ms == entry[0]
                    and self.intake.holds(lease.worker_id, entry[0], now_ms))
        out, still = [], []
        for entry in [*self.gateway_held, *ready]:
            (still if held(entry) else out).append(entry)
        self.gateway_held = still
        return out

    def usage(self, now_ms: int) -> dict[str, TenantUsage]:
        """This partition's usage alone (the scheduler passes the usage of all partitions, fairshare.py)."""
        return {t: TenantUsage(t, r.consumed_gpu_seconds + r.in_flight_gpu_seconds, r.in_flight)
                for t in self.ledger.tenants() for r in [self.ledger.report(t, self.partition, now_ms)]}

    def next_timer_ms(self) -> int | None:
        return min((h[0][0] for h in (self.heap, self.held) if h), default=None)

    def read_log(self, offset: int, appended_ms: int | None) -> None:
        self.read_upto = max(self.read_upto, offset)
        if appended_ms is not None:
            self.log_ms = max(self.log_ms, appended_ms)
