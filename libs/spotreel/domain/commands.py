"""Commands: what someone asks the scheduler to do. Each may be accepted or rejected by `decide`.

Every command is a flat frozen dataclass whose fields are limited to str, int, float, bool, optionals of
those and tuple[str, ...], because the codec maps them field by field onto the Avro records in `schemas/`
(record name = class name, same field order). Times are epoch milliseconds in `*_ms` ints.

Job commands carry `command_id` (unique per request; it becomes the `causation_id` of the events it
produces) and `job_id` (the Kafka key). Commands sent by a worker also carry the fencing `epoch` and the
`worker_id` of the lease they act under. Schedule commands are keyed by `schedule_id` instead of `job_id`
because a cron schedule is its own aggregate.

Adding a field: append it at the end with a default, and add it with the same default to the .avsc, so the
schema stays BACKWARD compatible.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotreel.domain.presence import IdleWorker
from spotreel.domain.renewal_batch import BatchedRenewal
from spotreel.domain.spec import RenderSpec

# ---------------------------------------------------------------------------------------------------------
# Client and internal-service commands
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubmitJob:
    """Accept a video job. `job_id` must equal `ids.job_id_for(tenant, idempotency_key)`.

    `request_hash` is `ids.request_hash` of the client's body: the same key with the same hash is a no-op,
    the same key with another hash is rejected. `spec` is the video asked for (domain/spec.py); `gpu_type`
    with `spec.model` names the pool. The settings after `callback_url` are the job's policy;
    the gateway fills them from its settings so the domain never reads configuration.
    """

    command_id: str
    job_id: str
    tenant: str
    idempotency_key: str
    request_hash: str
    gpu_type: str
    spec: RenderSpec
    priority: int = 0
    callback_url: str | None = None
    run_at_ms: int | None = None
    parents: tuple[str, ...] = ()
    dag_policy: str = "fail_fast"
    max_attempts: int = 5
    max_preemptions: int = 50
    keep_checkpoints: int = 3
    backoff_base_ms: int = 2_000
    backoff_max_ms: int = 300_000
    poison_threshold: int = 3
    poison_window_ms: int = 60_000
    schedule_id: str | None = None
    occurrence_ms: int | None = None
    # Time limits (domain/limits.py): rendering wall time across attempts (None: no timeout), and the stuck
    # rule (no step advance for max(stuck_min_ms, stuck_steps x the lease's mean step time); 0 steps: off).
    timeout_ms: int | None = None
    stuck_steps: int = 10
    stuck_min_ms: int = 120_000


@dataclass(frozen=True)
class CancelJob:
    command_id: str
    job_id: str
    reason: str = "user"


@dataclass(frozen=True)
class EraseJob:
    """Erase the job's personal data (the gateway deleted its data key and objects first): cancels it when it
    is still live, then records JobErased. Accepted in every state, finished and evicted ones included.
    `by`: who asked, as `tenant:<id>` or `operator:<name>`."""

    command_id: str
    job_id: str
    by: str
    reason: str = "user"


@dataclass(frozen=True)
class PauseJob:
    command_id: str
    job_id: str
    reason: str = "user"


@dataclass(frozen=True)
class ResumeJob:
    command_id: str
    job_id: str


@dataclass(frozen=True)
class Reprioritize:
    command_id: str
    job_id: str
    priority: int


@dataclass(frozen=True)
class RequeueJob:
    """Operator action: put a failed or dead-lettered job back in the queue with a fresh attempt budget."""

    command_id: str
    job_id: str
    reason: str = "manual"


# ---------------------------------------------------------------------------------------------------------
# Scheduler-internal commands (timers and dispatch)
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GrantLease:
    """Turn a worker's request for work into a lease on this job. The epoch is chosen by `decide`."""

    command_id: str
    job_id: str
    worker_id: str
    pool: str
    lease_ttl_ms: int
    # Why dispatch chose this job (grant_reasons.py), copied onto the JobLeased; None/False/0 when unknown.
    why_priority: float | None = None
    why_overdue: bool = False
    why_waited_ms: int | None = None
    why_share: float | None = None
    why_next_share: float | None = None
    why_weight: float | None = None
    why_warm: bool = False
    why_candidates: int = 0
    # The worker's fingerprint (RequestWork.fingerprint): decide resumes from the newest checkpoint it can use.
    worker_fingerprint: str = ""


@dataclass(frozen=True)
class ExpireLease:
    """Lease timer. Names the epoch it was armed for, so a timer left over from an older lease is refused.
    `rule` names the deadline it enforces (limits.Rule): `ttl` (not renewed in time), `timeout` (the job's
    rendering time is used up) or `stuck` (no step advance for too long)."""

    command_id: str
    job_id: str
    epoch: int
    rule: str = "ttl"


@dataclass(frozen=True)
class PreemptLease:
    """Ask the holder of `epoch` to checkpoint and hand the lease back for waiting work of tier
    `for_priority` (sent by the scheduler's preemption step, domain/preemption.py). Refused unless the job
    holds that lease, nothing else was asked of it, and its own priority is below `for_priority`."""

    command_id: str
    job_id: str
    epoch: int
    for_priority: int
    reason: str = "preempted_for"


@dataclass(frozen=True)
class ActivateJob:
    """Run-at timer: the job's run_at or retry backoff is over."""

    command_id: str
    job_id: str


@dataclass(frozen=True)
class ResolveParent:
    """A DAG parent of this job reached a terminal state. `outcome` is that parent's terminal status."""

    command_id: str
    job_id: str
    parent_id: str
    outcome: str


@dataclass(frozen=True)
class WatchParent:
    """Sent by a waiting child's owner to the parent's partition (`job_id` is the parent): the parent's owner
    records `child_id` as a watcher and answers with ResolveParent to the child as soon as the parent is
    terminal, at once if it already is. A job only names parents that already exist, so this cannot wait
    on a job submitted later (no cycle can form); an unknown parent is answered as cancelled."""

    command_id: str
    job_id: str
    child_id: str


# ---------------------------------------------------------------------------------------------------------
# Worker commands: each one acts under a lease and is fenced by its epoch
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RenewLease:
    command_id: str
    job_id: str
    epoch: int
    worker_id: str


@dataclass(frozen=True)
class ReportProgress:
    """`progress_pct` is the worker's own estimate (0..100) for the whole job, not for this lease."""

    command_id: str
    job_id: str
    epoch: int
    worker_id: str
    step: int
    progress_pct: float
    phase: str = "denoising"


@dataclass(frozen=True)
class RecordCheckpoint:
    """A checkpoint object is durable in the store; only an accepted CheckpointRecorded makes it count."""

    command_id: str
    job_id: str
    epoch: int
    worker_id: str
    checkpoint_key: str
    step: int
    progress_pct: float
    checksum: str
    size_bytes: int
    # How long the worker took to write it (the checkpoint cost C of Young/Daly); None when not measured.
    duration_ms: int | None = None
    # The writer's numerical environment for this render (resume_match.py); "": the lease's, as asked with.
    fingerprint: str = ""


@dataclass(frozen=True)
class CompleteJob:
    command_id: str
    job_id: str
    epoch: int
    worker_id: str
    artifact_key: str
    artifact_checksum: str
    artifact_size_bytes: int


@dataclass(frozen=True)
class FailJob:
    """A visible failure. `invalid_checkpoint_key` names a resume checkpoint the worker could not load
    (bad checksum, wrong fingerprint) so the next lease resumes from an older one."""

    command_id: str
    job_id: str
    epoch: int
    worker_id: str
    error_code: str
    error_message: str
    retryable: bool = True
    invalid_checkpoint_key: str | None = None


@dataclass(frozen=True)
class ReleaseLease:
    """Graceful hand-back (spot warning, drain, or acknowledging a cancel/pause). Not a failure."""

    command_id: str
    job_id: str
    epoch: int
    worker_id: str
    reason: str = "preempted"


# ---------------------------------------------------------------------------------------------------------
# Cron schedule aggregate (keyed by schedule_id)
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreateSchedule:
    """A cron schedule that submits one job per occurrence. The fields from `spec` on are the job template
    (same meaning as in SubmitJob): `spec` the video, the rest how each occurrence's job runs.
    `missed_policy`: skip | run_once | run_all (see schedules.py).
    `timezone`: the IANA zone the expression is read in (cron.py defines DST gaps and overlaps).
    `overlap_policy`: allow | skip | cancel_previous, what an occurrence does while an earlier one's job
    has not ended (schedules.py). Occurrences at or after `start_ms` count (default: from creation on).
    `timeout_ms` (added later, null by default) is the template's time limit, copied into each occurrence's
    SubmitJob. Up to v3 the video's fields were flat here (codec/upcast.py lifts them into `spec`)."""

    command_id: str
    schedule_id: str
    tenant: str
    cron: str
    timezone: str
    missed_policy: str
    spec: RenderSpec
    gpu_type: str
    priority: int = 0
    callback_url: str | None = None
    start_ms: int | None = None
    grace_ms: int = 60_000
    max_catchup: int = 100
    max_attempts: int = 5
    max_preemptions: int = 50
    keep_checkpoints: int = 3
    backoff_base_ms: int = 2_000
    backoff_max_ms: int = 300_000
    poison_threshold: int = 3
    poison_window_ms: int = 60_000
    overlap_policy: str = "allow"
    timeout_ms: int | None = None


@dataclass(frozen=True)
class DeleteSchedule:
    command_id: str
    schedule_id: str


@dataclass(frozen=True)
class PauseSchedule:
    """No occurrence fires while paused; those that fall in the pause are skipped, not caught up."""

    command_id: str
    schedule_id: str


@dataclass(frozen=True)
class ResumeSchedule:
    command_id: str
    schedule_id: str


@dataclass(frozen=True)
class EndOccurrence:
    """From the job's partition: the job of one occurrence reached a terminal status (`outcome`)."""

    command_id: str
    schedule_id: str
    occurrence_ms: int
    outcome: str


@dataclass(frozen=True)
class FireOccurrence:
    """Schedule timer: the next occurrence is due (or overdue, after downtime)."""

    command_id: str
    schedule_id: str


JobCommand = (
    SubmitJob
    | CancelJob
    | EraseJob
    | PauseJob
    | ResumeJob
    | Reprioritize
    | RequeueJob
    | GrantLease
    | ExpireLease
    | ActivateJob
    | ResolveParent
    | WatchParent
    | RenewLease
    | ReportProgress
    | RecordCheckpoint
    | CompleteJob
    | FailJob
    | ReleaseLease
)
ScheduleCommand = (
    CreateSchedule | DeleteSchedule | FireOccurrence | PauseSchedule | ResumeSchedule | EndOccurrence
)

WORKER_COMMANDS = (RenewLease, ReportProgress, RecordCheckpoint, CompleteJob, FailJob, ReleaseLease)
JOB_COMMANDS = (
    SubmitJob,
    CancelJob,
    EraseJob,
    PauseJob,
    ResumeJob,
    Reprioritize,
    RequeueJob,
    GrantLease,
    ExpireLease,
    PreemptLease,
    ActivateJob,
    ResolveParent,
    WatchParent,
    *WORKER_COMMANDS,
)
SCHEDULE_COMMANDS = (CreateSchedule, DeleteSchedule, FireOccurrence, PauseSchedule, ResumeSchedule, EndOccurrence)
ALL_COMMANDS = (*JOB_COMMANDS, *SCHEDULE_COMMANDS)


# ---------------------------------------------------------------------------------------------------------
# Dispatch (not a job command: it names no job; the scheduler picks one with job_choice.choose)
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestWork:
    """A worker asks its pool for work. `command_id` is the request id the answer names; the requester
    sends it to a partition that advertises queued work for the pool (see the pool-stats topic). A
    draining worker may still send it (to report that it drains) and never gets a lease."""

    command_id: str
    worker_id: str
    gpu_type: str
    models: tuple[str, ...]
    warm_models: tuple[str, ...] = ()
    draining: bool = False
    lease_ttl_ms: int = 30000
    sent_at_ms: int = 0
    # The worker's numerical environment (resume_match.py): which checkpoints it can resume from exactly.
    fingerprint: str = ""


DISPATCH_COMMANDS = (RequestWork,)


# ---------------------------------------------------------------------------------------------------------
# Intake (not a job command: a gateway vouches for the worker requests it has taken in)
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GatewayPulse:
    """A gateway's worker API, about every second, to every partition of the commands topic: every worker
    request it had started to read before `vouched_ms` is on the commands topic before this record. Until a
    gateway vouches past a lease's deadline, the owner holds the expiry of the leases whose holder last came
    through it (services/scheduler/intake.py), at most the scheduler's gateway hold: a control plane behind
    at its edge does not cost a live worker its lease. `leaving`: its last pulse (it stops), hold nothing
    for it any more. `idle`: the idle workers (in a lease poll, not draining) whose presence on this
    partition is due (dispatch/asking.py): the owner counts them as if each had sent a RequestWork, and
    nobody waits for an answer."""

    command_id: str
    gateway_id: str
    vouched_ms: int
    leaving: bool = False
    idle: tuple[IdleWorker, ...] = ()


INTAKE_COMMANDS = (GatewayPulse,)



# ---------------------------------------------------------------------------------------------------------
# Renewals and lease requests batched across workers (a gateway's renewal window; domain/renewal_batch.py)
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RenewalBatch:
    """A gateway's lease renewals (RenewLease, ReportProgress) of several workers whose jobs share one commands
    partition, and the lease requests (RequestWork) of its idle workers that ask that partition, in one
    record: the owner judges each one as if it had come alone, in order (the renewals, then the requests), a
    renewal at its own send time (`sent_ms`), through `gateway_id`. Keyed by the gateway; the renewals it
    absorbs and the requests it refuses are answered in one RenewalReplies record, a grant alone on the
    assignments topic."""

    batch_id: str
    gateway_id: str
    renewals: tuple[BatchedRenewal, ...]
    requests: tuple[RequestWork, ...] = ()

    def commands(self) -> list[tuple[RenewLease | ReportProgress | RequestWork, int]]:
        """Each entry as the command a worker would have sent alone, with its send time (ms), in the order of
        their places (`cmd-entry`): the renewals, then the requests."""
        return [*((command_of(r), r.sent_ms) for r in self.renewals),
                *((r, r.sent_at_ms) for r in self.requests)]


BATCHED_COMMANDS = (RenewLease, ReportProgress)


def batched(command: RenewLease | ReportProgress, sent_ms: int) -> BatchedRenewal:
    """A renewal's entry in a RenewalBatch."""
    if isinstance(command, ReportProgress):
        return BatchedRenewal(command.command_id, command.job_id, command.epoch, command.worker_id, sent_ms,
                              command.step, command.progress_pct, command.phase)
    return BatchedRenewal(command.command_id, command.job_id, command.epoch, command.worker_id, sent_ms)


def command_of(entry: BatchedRenewal) -> RenewLease | ReportProgress:
    """The command an entry stands for: a ReportProgress when it has a step, else a RenewLease."""
    if entry.step is None:
        return RenewLease(entry.command_id, entry.job_id, entry.epoch, entry.worker_id)
    return ReportProgress(entry.command_id, entry.job_id, entry.epoch, entry.worker_id, entry.step,
                          entry.progress_pct if entry.progress_pct is not None else 0.0,
                          entry.phase if entry.phase is not None else "denoising")
