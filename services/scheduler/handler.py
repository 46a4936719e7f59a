"""Turning one command record into its outputs, against the job table. No Kafka here: command_batches.py does the I/O
in the order that makes the loop exactly-once (events, then table, see README.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec, CodecError
from spotreel.domain import commands as cmd
from spotreel.domain import events as ev
from spotreel.domain import limits
from spotreel.domain.decide import decide
from spotreel.domain.job_choice import DispatchConfig
from spotreel.domain.evolve import fold
from spotreel.domain.fairness import TenantPolicy, TenantUsage
from spotreel.domain.grant_reasons import GrantReasons, reasons
from spotreel.domain.ids import pool_key
from spotreel.domain.leases import judged_at
from spotreel.domain.pools import WorkerOffer
from spotreel.domain.records import replace
from spotreel.domain.renewals import absorbed, flushed
from spotreel.domain.resume_match import hold_for_match
from spotreel.dispatch.asking import HELD
from spotreel.domain.schedules import ScheduleState, decide_schedule, fold_schedule
from spotreel.domain.state import JobState

from spotreel.services.scheduler import followups

from spotreel.services.scheduler.partition import PartitionState, WorkerSeen
from spotreel.services.scheduler.preempting import FREE_WINDOW_MS


@dataclass
class HandlerResult:
    events: list[Any] = field(default_factory=list)
    states: dict[str, tuple[JobState | None, JobState]] = field(default_factory=dict)  # job -> (before, after)
    schedules: dict[str, tuple[ScheduleState | None, ScheduleState]] = field(default_factory=dict)
    followups: list[Any] = field(default_factory=list)  # commands for other aggregates (followups.py)
    answer: Any = None  # WorkAssigned / NoWorkAvailable for a RequestWork
    deadletter: dict[str, Any] | None = None
    command: Any = None
    # A renewal answered without an event (domain/renewals.py): the answer, which goes to the replies topic
    # (its `version` is the stored state's: "as of this version"), and the stored state it was judged with.
    reply: Any = None
    reply_to: JobState | None = None
    pulse: Any = None  # a GatewayPulse (intake.py): nothing to decide, the partition notes it


class Handler:
    def __init__(self, codec: Codec, partitions: int, get: Callable[[str], JobState | None],
                 dispatch_config: DispatchConfig | None = None,
                 get_schedule: Callable[[str], ScheduleState | None] = lambda _: None,
                 absorb_renewals: bool = True,
                 progress_persist_ms: int = 0,
                 worker_busy: Callable[[str], bool] = lambda _: False,
                 usage: Callable[[PartitionState, int], Mapping[str, TenantUsage]] | None = None,
                 policies: Callable[[], Mapping[str, TenantPolicy]] = dict,
                 resume_hold_ms: int = 0) -> None:
        self.codec = codec
        self.partitions = partitions
        self.get = get
        self.get_schedule = get_schedule
        self.absorb_renewals = absorb_renewals
        # Progress that moves only the position is written at most once per this many ms (renewals.py).
        self.progress_persist_ms = progress_persist_ms
        # Whether a worker holds a lease granted by any partition (workerleases.py): one job per worker.
        self.worker_busy = worker_busy
        self.config = dispatch_config or DispatchConfig()
        # Each tenant's usage (all partitions, fairshare.GlobalUsage) and policy (weight, in-flight ceiling)
        # for dispatch; without them, this partition's usage and equal weights.
        self.usage = usage or (lambda part, now_ms: part.usage(now_ms))
        self.policies = policies
        # How long a job may be kept for an idle worker that can resume its newest checkpoint exactly
        # (domain/resume_match.py); 0: never kept.
        self.resume_hold_ms = resume_hold_ms

    def handle(self, part: PartitionState, topic: str, offset: int, key: bytes | None, value: bytes | None,
               now_ms: int, appended_ms: int | None = None, sent_ms: int | None = None) -> HandlerResult:
        """Decode one command record and judge it (`judge`). `appended_ms`: the broker's append time of the
        record (LogAppendTime), None if the topic stamps records with the producer's clock; lease commands are
        judged at it (`leases.judged_at`). `sent_ms`: when its holder sent it, for a lease command that came
        through a gateway (intake.py): its expiry is judged at that time instead."""
        command = self.decode(part, topic, offset, key, value, now_ms)
        if isinstance(command, HandlerResult):
            return command
        return self.judge(part, topic, offset, key, value, command, now_ms, appended_ms, sent_ms)

    def decode(self, part: PartitionState, topic: str, offset: int, key: bytes | None, value: bytes | None,
               now_ms: int) -> Any:
        """The command a record holds, or the dead letter (a HandlerResult) of one that does not decode."""
        try:
            return self.codec.decode_message(value)
        except CodecError as exc:
            return dead_letter(part, topic, offset, key, value, now_ms, exc.reason, str(exc))

    def judge(self, part: PartitionState, topic: str, offset: int, key: bytes | None, value: bytes | None,
              command: Any, now_ms: int, appended_ms: int | None = None,
              sent_ms: int | None = None) -> HandlerResult:
        """A decoded command's outputs (`value`, the record's bytes, only goes into a dead letter)."""
        def dead(reason: str, detail: str) -> HandlerResult:
            return dead_letter(part, topic, offset, key, value, now_ms, reason, detail)

        if isinstance(command, cmd.RequestWork):
            out = self._request_work(part, command, now_ms)
        elif isinstance(command, cmd.GatewayPulse):
            for w in command.idle:
                self._present(part, w.worker_id, w.gpu_type, w.models, w.warm_models, now_ms)
            out = HandlerResult(pulse=command)
        elif isinstance(command, cmd.JOB_COMMANDS):
            if partition_for(command.job_id, self.partitions) != part.partition:
                # A producer that did not use the pinned partitioner: applying it here would make two writers.
                return dead("wrong_partition", f"{command.job_id} belongs to partition "
                            f"{partition_for(command.job_id, self.partitions)}, not {part.partition}")
            out = self._apply(command, judged_at(command, now_ms, appended_ms), part=part, sent_ms=sent_ms)
        elif isinstance(command, cmd.SCHEDULE_COMMANDS):
            if partition_for(command.schedule_id, self.partitions) != part.partition:
                return dead("wrong_partition", f"schedule {command.schedule_id} belongs to partition "
                            f"{partition_for(command.schedule_id, self.partitions)}, not {part.partition}")
            out = self._apply_schedule(command, now_ms)
        else:
            return dead("not_a_command", f"{type(command).__name__} is not handled by the job scheduler")
        out.command = command
        return out

    def misplaced(self, part: PartitionState, batch: cmd.RenewalBatch) -> str | None:
        """Why a RenewalBatch cannot be applied here (a renewal of a job on another partition), or None. Such a
        batch is dead-lettered whole: its renewals are only renewals, and their holders renew again."""
        for r in batch.renewals:
            if partition_for(r.job_id, self.partitions) != part.partition:
                return (f"renewal {r.command_id}: {r.job_id} belongs to partition "
                        f"{partition_for(r.job_id, self.partitions)}, not {part.partition}")
        return None

    def _apply(self, command: Any, now_ms: int, out: HandlerResult | None = None,
               part: PartitionState | None = None, sent_ms: int | None = None) -> HandlerResult:
        out = out or HandlerResult()
        before = self.get(command.job_id)
        judged = part.view(before) if part is not None else before
        events = decide(judged, command, now_ms, sent_ms)
        renewal = absorbed(judged, events, self.progress_persist_ms) \
            if part is not None and self.absorb_renewals else None
        if renewal is not None:
            out.reply, out.reply_to = replace(renewal, version=before.version), before
            return out
        if part is not None:
            # The newest absorbed position is written first: the view it was judged against (renewals.py).
            events = flushed(part.pending.get(command.job_id), before, events)
        out.events.extend(events)
        after = fold(events, before)
        if after is not None and after is not before:
            out.states[command.job_id] = (before, after)
        for e in events:
            out.followups.extend(followups.for_job_event(e, after))
        return out

    def _apply_schedule(self, command: Any, now_ms: int) -> HandlerResult:
        out = HandlerResult()
        before = self.get_schedule(command.schedule_id)
        events = decide_schedule(before, command, now_ms)
        out.events.extend(events)
        after = fold_schedule(events, before)
        if after is not None and after is not before:
            out.schedules[command.schedule_id] = (before, after)
        for e in events:
            out.followups.extend(followups.for_schedule_event(e, after))
        return out

    @staticmethod
    def _seen(part: PartitionState, offer: WorkerOffer, now_ms: int, fingerprint: str | None = None) -> None:
        """`fingerprint` None (a pulse, which carries none): the one its last RequestWork told."""
        if fingerprint is None:
            known = part.workers.get(offer.worker_id)
            fingerprint = known.fingerprint if known is not None else ""
        part.worker_asked(offer.worker_id, WorkerSeen(
            now_ms, offer.draining, tuple(pool_key(p.model, p.gpu_type) for p in offer.pools), True,
            tuple(pool_key(p.model, p.gpu_type) for p in offer.pools if offer.is_warm(p)), fingerprint))

    def _held_for_match(self, part: PartitionState, c: cmd.RequestWork, state: JobState, waited_ms: int,
                        now_ms: int) -> bool:
        """Resume affinity (domain/resume_match.py): keep the job from this worker for now, because an idle
        worker of its pool can resume its newest checkpoint exactly and this one cannot."""
        newest = state.resume_point
        if self.resume_hold_ms <= 0 or newest is None or not newest.fingerprint:
            return False
        idle = (part.workers[w].fingerprint for w in part.workers.idle_since(state.pool, now_ms - FREE_WINDOW_MS)
                if w != c.worker_id and w not in part.busy_workers and not self.worker_busy(w))
        return hold_for_match(newest, c.fingerprint, idle, waited_ms, self.resume_hold_ms)

    def _present(self, part: PartitionState, worker_id: str, gpu_type: str, models: tuple[str, ...],
                 warm: tuple[str, ...], now_ms: int) -> None:
        """An idle worker a gateway vouched for in its pulse: seen as by its RequestWork (pool stats' idle
        workers, preemption's free ones), nothing to answer. One this scheduler knows to hold a lease is
        left as its lease commands keep it (the pulse may be older than the grant)."""
        if worker_id in part.busy_workers or self.worker_busy(worker_id):
            return
        self._seen(part, WorkerOffer(worker_id, gpu_type, frozenset(models), frozenset(warm), False), now_ms)

    def _request_work(self, part: PartitionState, c: cmd.RequestWork, now_ms: int) -> HandlerResult:
        offer = WorkerOffer(c.worker_id, c.gpu_type, frozenset(c.models), frozenset(c.warm_models), c.draining)
        self._seen(part, offer, now_ms, c.fingerprint)

        def none(reason: str) -> HandlerResult:
            return HandlerResult(answer=ev.NoWorkAvailable(c.command_id, c.worker_id, now_ms, reason, part.partition))

        if c.draining:
            return none("draining")
        if not limits.lease_ttl_fits(c.lease_ttl_ms, now_ms):
            # Every grant would be refused; trying them would drop up to 8 queued jobs from the index.
            return none("invalid_lease_ttl")
        if c.worker_id in part.busy_workers or self.worker_busy(c.worker_id):
            return none("worker_holds_lease")
        # The index is a hint; decide is the authority. A stale head is dropped and the next one tried.
        usage, policies = self.usage(part, now_ms), self.policies()
        kept: set[str] = set()  # jobs held for a worker that can resume them exactly
        for _ in range(8):
            job_id = part.index.choose(offer, usage, policies, now_ms, self.config, skip=kept)
            if job_id is None:
                return none(HELD if kept else "no_queued_job")
            state = self.get(job_id)
            queued = part.index.get(job_id)
            if state is not None and queued is not None and \
                    self._held_for_match(part, c, state, now_ms - queued.enqueued_at_ms, now_ms):
                kept.add(job_id)
                continue
            why = reasons(queued, offer, part.index.heads(offer, kept), usage, policies, now_ms, self.config) \
                if queued is not None else None
            grant = cmd.GrantLease(f"rw:{c.command_id}", job_id, c.worker_id, state.pool if state else "",
                                   c.lease_ttl_ms, **why_fields(why), worker_fingerprint=c.fingerprint)
            out = self._apply(grant, now_ms)
            leased = next((e for e in out.events if isinstance(e, ev.JobLeased)), None)
            if leased is None:
                part.index.discard(job_id)
                continue
            part.worker_took_lease(c.worker_id)
            out.answer = work_assigned(c.command_id, leased, out.states[job_id][1], part.partition)
            return out
        return none(HELD if kept else "no_queued_job")

    def reanswer(self, part: PartitionState, value: bytes | None, now_ms: int) -> list[Any]:
        """The answers to a redelivered RequestWork whose decision is already on the events topic (its offset
        is at or below `applied_upto`), or to the lease requests of a RenewalBatch applied whole: the same
        lease again, never a second one (`answer_again`). Empty for other commands."""
        try:
            command = self.codec.decode_message(value)
        except CodecError:
            return []
        if isinstance(command, cmd.RequestWork):
            return [self.answer_again(part, command, now_ms)]
        if isinstance(command, cmd.RenewalBatch):
            return [self.answer_again(part, r, now_ms) for r in command.requests]
        return []

    def answer_again(self, part: PartitionState, command: cmd.RequestWork, now_ms: int) -> Any:
        """A request decided before: its remembered grant, or NoWorkAvailable when it had none in the
        redelivery window (it had no events, so it was refused)."""
        leased = part.grants.get(command.command_id)
        state = self.get(leased.job_id) if leased is not None else None
        if leased is not None and state is not None:
            return work_assigned(command.command_id, leased, state, part.partition)
        return ev.NoWorkAvailable(command.command_id, command.worker_id, now_ms,
                                  "draining" if command.draining else "no_queued_job", part.partition)


def dead_letter(part: PartitionState, topic: str, offset: int, key: bytes | None, value: bytes | None, now_ms: int,
                reason: str, detail: str) -> HandlerResult:
    return HandlerResult(deadletter={
        "reason": reason, "detail": detail, "source_topic": topic, "source_partition": part.partition,
        "source_offset": offset, "original_key": key, "original": value or b"", "at_ms": now_ms})


def work_assigned(request_id: str, leased: ev.JobLeased, s: JobState, partition: int) -> ev.WorkAssigned:
    """The answer for a grant: the lease from its JobLeased, the job's settings from its state."""
    return ev.WorkAssigned(
        request_id=request_id, worker_id=leased.worker_id, job_id=leased.job_id, epoch=leased.epoch,
        attempt=leased.attempt, at_ms=leased.at_ms, lease_ttl_ms=leased.lease_ttl_ms,
        lease_expires_at_ms=leased.lease_expires_at_ms, pool=leased.pool, gpu_type=s.gpu_type, spec=s.spec,
        resume_checkpoint_key=leased.resume_checkpoint_key, resume_step=leased.resume_step,
        resume_progress_pct=leased.resume_progress_pct, partition=partition)


def why_fields(r: GrantReasons | None) -> dict[str, Any]:
    """The GrantLease / JobLeased `why_*` fields of a grant's reasons (domain/grant_reasons.py)."""
    if r is None:
        return {}
    return {"why_priority": r.effective_priority, "why_overdue": r.overdue, "why_waited_ms": r.waited_ms,
            "why_share": r.share, "why_next_share": r.next_share, "why_weight": r.weight, "why_warm": r.warm,
            "why_candidates": r.candidates}
