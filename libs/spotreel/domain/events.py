"""Events: facts the scheduler recorded. Only `decide` creates them; `evolve` folds them into state.

Job events start with the same four fields:
  job_id        the aggregate (and Kafka key)
  version       1-based position in the job's history. Every accepted event takes the next slot.
                CommandRejected is the exception: it carries the version the command was judged against
                and takes no slot, because a rejection changes nothing (a job nobody submitted has version 0).
  at_ms         the partition owner's clock when it decided (never a worker's clock)
  causation_id  the command_id that produced it
Schedule events have the same shape with `schedule_id` in place of `job_id`.

Fields carry the values `decide` computed (new counters, new expiry, pruned checkpoints) so that `evolve`
copies instead of recomputing and replay cannot diverge from the original decision.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotreel.domain.spec import RenderSpec

# ---------------------------------------------------------------------------------------------------------
# Lifecycle
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobSubmitted:
    job_id: str
    version: int
    at_ms: int
    causation_id: str
    tenant: str
    idempotency_key: str
    request_hash: str
    gpu_type: str
    pool: str
    spec: RenderSpec
    priority: int
    callback_url: str | None
    run_at_ms: int | None
    parents: tuple[str, ...]
    dag_policy: str
    max_attempts: int
    max_preemptions: int
    keep_checkpoints: int
    backoff_base_ms: int
    backoff_max_ms: int
    poison_threshold: int
    poison_window_ms: int
    schedule_id: str | None = None
    occurrence_ms: int | None = None
    timeout_ms: int | None = None
    stuck_steps: int = 10
    stuck_min_ms: int = 120_000


@dataclass(frozen=True)
class JobScheduled:
    """Not runnable before `run_at_ms`. reason: run_at | backoff."""

    job_id: str
    version: int
    at_ms: int
    causation_id: str
    run_at_ms: int
    reason: str


@dataclass(frozen=True)
class JobWaiting:
    """Waiting for DAG parents; `pending_parents` are those without an outcome yet."""

    job_id: str
    version: int
    at_ms: int
    causation_id: str
    pending_parents: tuple[str, ...]


@dataclass(frozen=True)
class JobQueued:
    """Runnable: eligible for a lease. reason: submitted | due | parents_resolved."""

    job_id: str
    version: int
    at_ms: int
    causation_id: str
    reason: str


@dataclass(frozen=True)
class JobRequeued:
    """Back in the queue after a lost lease, a graceful release, or a manual requeue.

    `budget_reset` is true for a manual requeue: attempts, preemptions and the poison window start over."""

    job_id: str
    version: int
    at_ms: int
    causation_id: str
    reason: str
    budget_reset: bool


@dataclass(frozen=True)
class CancelRequested:
    """The job is leased: the worker holding `epoch` must confirm (release/fail) or let the lease expire."""

    job_id: str
    version: int
    at_ms: int
    causation_id: str
    reason: str
    epoch: int


@dataclass(frozen=True)
class JobCancelled:
    job_id: str
    version: int
    at_ms: int
    causation_id: str
    reason: str


@dataclass(frozen=True)
class JobErased:
    """The job's personal data was erased: its data key is deleted, so the prompt, negative prompt and
    callback URL its events carry sealed can no longer be opened. Holds no personal data itself."""

    job_id: str
    version: int
    at_ms: int
    causation_id: str
    by: str
    reason: str


@dataclass(frozen=True)
class PauseRequested:
    """Like CancelRequested but the job comes back on ResumeJob; the lease holder should checkpoint and release."""

    job_id: str
    version: int
    at_ms: int
    causation_id: str
    reason: str
    epoch: int


@dataclass(frozen=True)
class PreemptRequested:
    """The scheduler wants this lease's GPU for higher-tier work waiting in the pool (preemption.py): the holder
    of `epoch` should checkpoint and release, as for a pause, and the job goes straight back to the queue
    (JobRequeued reason `preempted_for`) without spending an attempt or its preemption budget.
    `for_priority`: the tier of the waiting work it yields to."""

    job_id: str
    version: int
    at_ms: int
    causation_id: str
    reason: str
    epoch: int
    for_priority: int


@dataclass(frozen=True)
class JobPaused:
    job_id: str
    version: int
    at_ms: int
    causation_id: str
    reason: str


@dataclass(frozen=True)
class JobResumed:
    """`status` is where the job goes: queued, scheduled, waiting, or (a pause withdrawn before the worker
    released) leased/running."""

    job_id: str
    version: int
    at_ms: int
    causation_id: str
    status: str


@dataclass(frozen=True)
class JobReprioritized:
    job_id: str
    version: int
    at_ms: int
    causation_id: str
    priority: int
    previous_priority: int


@dataclass(frozen=True)
class ParentResolved:
    job_id: str
    version: int
    at_ms: int
    causation_id: str
    parent_id: str
    outcome: str


@dataclass(frozen=True)
class ParentWatched:
    """A child (`child_id`) waits for this job to end. `status` is this job's status when the watch was
    recorded: if it is terminal, the child is answered at once. Accepted in every state, terminal included
    (it changes no lifecycle field, only who must be told)."""

    job_id: str
    version: int
    at_ms: int
    causation_id: str
    child_id: str
    status: str


# ---------------------------------------------------------------------------------------------------------
# Leases
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobLeased:
    """A lease under a new fencing `epoch`. `attempt` counts leases (runs) of this job, 1-based.

    The resume_* fields name the newest valid checkpoint the worker's fingerprint can use (resume_match.py),
    which the worker must load; None means start from step 0."""

    job_id: str
    version: int
    at_ms: int
    causation_id: str
    worker_id: str
    pool: str
    epoch: int
    attempt: int
    lease_ttl_ms: int
    lease_expires_at_ms: int
    resume_checkpoint_key: str | None
    resume_step: int | None
    resume_progress_pct: float | None
    # Why this job won the grant (domain/grant_reasons.py; `spotreel replay --why`): the effective priority
    # (tier + aging credit), overdue, time waited, the tenant's fair share and weight, the smallest share of
    # the other tenants with a candidate, whether the model was warm, queue heads considered. Defaults: a
    # grant recorded before these fields, or made without dispatch.
    why_priority: float | None = None
    why_overdue: bool = False
    why_waited_ms: int | None = None
    why_share: float | None = None
    why_next_share: float | None = None
    why_weight: float | None = None
    why_warm: bool = False
    why_candidates: int = 0
    # Which checkpoint this lease resumes from and why (resume_match.py): the worker's fingerprint, the reason
    # (no_checkpoint, newest, older_compatible, none_compatible; None: recorded before), the newer checkpoints
    # skipped as made on another environment, and a line naming what differs.
    worker_fingerprint: str = ""
    resume_reason: str | None = None
    resume_skipped_keys: tuple[str, ...] = ()
    resume_detail: str | None = None


@dataclass(frozen=True)
class LeaseRenewed:
    """The holder's lease extended to `lease_expires_at_ms`. `cancel_requested` asks it to stop,
    `drain_requested` to checkpoint and hand the lease back (a pause); false in records written before these
    fields existed."""

    job_id: str
    version: int
    at_ms: int
    causation_id: str
    epoch: int
    lease_expires_at_ms: int
    # As of this verdict: stop (a cancel was requested) or checkpoint and hand the lease back (a pause was
    # requested). The gateway answers the worker from these without reading the job.
    cancel_requested: bool = False
    drain_requested: bool = False


@dataclass(frozen=True)
class ProgressReported:
    """Progress also proves the worker alive, so it extends the lease like a renewal."""

    job_id: str
    version: int
    at_ms: int
    causation_id: str
    epoch: int
    step: int
    progress_pct: float
    phase: str
    lease_expires_at_ms: int
    cancel_requested: bool = False
    drain_requested: bool = False


@dataclass(frozen=True)
class CheckpointRecorded:
    """`pruned_keys` fall out of the keep-latest-N window; a garbage collector may delete those objects."""

    job_id: str
    version: int
    at_ms: int
    causation_id: str
    epoch: int
    checkpoint_key: str
    step: int
    progress_pct: float
    checksum: str
    size_bytes: int
    pruned_keys: tuple[str, ...]
    duration_ms: int | None = None  # the worker's write time, as reported in RecordCheckpoint
    fingerprint: str = ""  # the lease holder's (resume_match.py): who can resume from it exactly


@dataclass(frozen=True)
class LeaseExpired:
    """The owner's clock passed the lease expiry. `preemptions` is the new count (unchanged when the lease
    was only being held to confirm a cancel or pause)."""

    job_id: str
    version: int
    at_ms: int
    causation_id: str
    epoch: int
    worker_id: str
    preemptions: int


@dataclass(frozen=True)
class LeaseReleased:
    job_id: str
    version: int
    at_ms: int
    causation_id: str
    epoch: int
    worker_id: str
    reason: str
    preemptions: int


# ---------------------------------------------------------------------------------------------------------
# Outcomes
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttemptFailed:
    """A visible failure under `epoch`; ends that lease. `attempts_used` is the new count against
    max_attempts (unchanged when the failure only confirmed a cancel)."""

    job_id: str
    version: int
    at_ms: int
    causation_id: str
    epoch: int
    worker_id: str
    error_code: str
    error_message: str
    retryable: bool
    attempts_used: int
    invalid_checkpoint_key: str | None


@dataclass(frozen=True)
class JobSucceeded:
    job_id: str
    version: int
    at_ms: int
    causation_id: str
    epoch: int
    artifact_key: str
    artifact_checksum: str
    artifact_size_bytes: int


@dataclass(frozen=True)
class JobFailed:
    job_id: str
    version: int
    at_ms: int
    causation_id: str
    reason: str
    error_code: str


@dataclass(frozen=True)
class JobDeadLettered:
    """reason: max_attempts | poison | max_preemptions."""

    job_id: str
    version: int
    at_ms: int
    causation_id: str
    reason: str
    attempts_used: int
    preemptions: int


@dataclass(frozen=True)
class CommandRejected:
    """A command `decide` refused. It changes no state and takes no version slot (see module doc).
    `epoch_given` is the command's epoch if it had one; `current_epoch` the job's highest epoch, or None
    for an unknown job."""

    job_id: str
    version: int
    at_ms: int
    causation_id: str
    command_id: str
    command_type: str
    reason: str
    detail: str
    epoch_given: int | None
    current_epoch: int | None


# ---------------------------------------------------------------------------------------------------------
# Cron schedule aggregate
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScheduleCreated:
    schedule_id: str
    version: int
    at_ms: int
    causation_id: str
    tenant: str
    cron: str
    timezone: str
    missed_policy: str
    grace_ms: int
    max_catchup: int
    next_occurrence_ms: int
    spec: RenderSpec
    gpu_type: str
    priority: int
    callback_url: str | None
    max_attempts: int
    max_preemptions: int
    keep_checkpoints: int
    backoff_base_ms: int
    backoff_max_ms: int
    poison_threshold: int
    poison_window_ms: int
    overlap_policy: str = "allow"
    timeout_ms: int | None = None


@dataclass(frozen=True)
class OccurrenceFired:
    """One job for one occurrence. `job_id` = ids.job_id_for(tenant, idempotency_key) with the key
    derived from (schedule_id, occurrence_ms), so firing twice can never create two jobs."""

    schedule_id: str
    version: int
    at_ms: int
    causation_id: str
    occurrence_ms: int
    job_id: str
    idempotency_key: str
    late: bool


@dataclass(frozen=True)
class OccurrencesSkipped:
    """Occurrences not run: every occurrence from first to last (inclusive) that no OccurrenceFired of the
    same decision names. Not counted, since a long outage may hold many. `reason`: missed (the catch-up
    policy), paused (they fell in a pause), overlap (an earlier occurrence's job had not ended)."""

    schedule_id: str
    version: int
    at_ms: int
    causation_id: str
    first_occurrence_ms: int
    last_occurrence_ms: int
    reason: str = "missed"


@dataclass(frozen=True)
class ScheduleAdvanced:
    """Occurrences up to and including `through_ms` are dealt with (fired or skipped); the timer moves to
    `next_occurrence_ms`, the first occurrence after `through_ms`."""

    schedule_id: str
    version: int
    at_ms: int
    causation_id: str
    through_ms: int
    next_occurrence_ms: int


@dataclass(frozen=True)
class ScheduleDeleted:
    schedule_id: str
    version: int
    at_ms: int
    causation_id: str


@dataclass(frozen=True)
class SchedulePaused:
    schedule_id: str
    version: int
    at_ms: int
    causation_id: str


@dataclass(frozen=True)
class ScheduleResumed:
    """Occurrences up to `through_ms` (the pause) are dealt with; the timer moves to `next_occurrence_ms`."""

    schedule_id: str
    version: int
    at_ms: int
    causation_id: str
    through_ms: int
    next_occurrence_ms: int


@dataclass(frozen=True)
class OccurrenceEnded:
    """The job of a fired occurrence reached a terminal status (`outcome`)."""

    schedule_id: str
    version: int
    at_ms: int
    causation_id: str
    occurrence_ms: int
    job_id: str
    outcome: str


@dataclass(frozen=True)
class ScheduleCommandRejected:
    schedule_id: str
    version: int
    at_ms: int
    causation_id: str
    command_id: str
    command_type: str
    reason: str
    detail: str


JOB_EVENTS = (
    JobSubmitted,
    JobScheduled,
    JobWaiting,
    JobQueued,
    JobRequeued,
    CancelRequested,
    JobCancelled,
    JobErased,
    PauseRequested,
    JobPaused,
    PreemptRequested,
    JobResumed,
    JobReprioritized,
    ParentResolved,
    ParentWatched,
    JobLeased,
    LeaseRenewed,
    ProgressReported,
    CheckpointRecorded,
    LeaseExpired,
    LeaseReleased,
    AttemptFailed,
    JobSucceeded,
    JobFailed,
    JobDeadLettered,
    CommandRejected,
)
SCHEDULE_EVENTS = (
    ScheduleCreated,
    OccurrenceFired,
    OccurrencesSkipped,
    ScheduleAdvanced,
    ScheduleDeleted,
    ScheduleCommandRejected,
    SchedulePaused,
    ScheduleResumed,
    OccurrenceEnded,
)
ALL_EVENTS = (*JOB_EVENTS, *SCHEDULE_EVENTS)

JobEvent = (
    JobSubmitted
    | JobScheduled
    | JobWaiting
    | JobQueued
    | JobRequeued
    | CancelRequested
    | JobCancelled
    | JobErased
    | PauseRequested
    | JobPaused
    | PreemptRequested
    | JobResumed
    | JobReprioritized
    | ParentResolved
    | ParentWatched
    | JobLeased
    | LeaseRenewed
    | ProgressReported
    | CheckpointRecorded
    | LeaseExpired
    | LeaseReleased
    | AttemptFailed
    | JobSucceeded
    | JobFailed
    | JobDeadLettered
    | CommandRejected
)
ScheduleEvent = (
    ScheduleCreated | OccurrenceFired | OccurrencesSkipped | ScheduleAdvanced | ScheduleDeleted | ScheduleCommandRejected
    | SchedulePaused | ScheduleResumed | OccurrenceEnded
)


# ---------------------------------------------------------------------------------------------------------
# Scheduler answers and statistics: not job events (they are never folded), but facts other services read.
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkAssigned:
    """The answer to RequestWork `request_id`: the worker holds the lease of the JobLeased event with the
    same job_id and epoch (written to the events topic first). Carries what the worker needs to start."""

    request_id: str
    worker_id: str
    job_id: str
    epoch: int
    attempt: int
    at_ms: int
    lease_ttl_ms: int
    lease_expires_at_ms: int
    pool: str
    gpu_type: str
    # The job's spec as submitted (render options None: the model's default, the worker's to fill in).
    spec: RenderSpec
    resume_checkpoint_key: str | None = None
    resume_step: int | None = None
    resume_progress_pct: float | None = None
    partition: int = 0


@dataclass(frozen=True)
class NoWorkAvailable:
    """The answer to RequestWork `request_id` when the partition asked had nothing the worker may run
    (or the worker drains): the requester tries another partition or waits."""

    request_id: str
    worker_id: str
    at_ms: int
    reason: str
    partition: int = 0


@dataclass(frozen=True)
class RenewalReplies:
    """The owner's answers to the renewals of one RenewalBatch that it absorbed (answered without an event,
    domain/renewals.py) and to the lease requests it refused, in one record on the replies topic keyed
    `~batch:<gateway_id>`: each one is the reply or NoWorkAvailable the command would have had alone. The
    batch's other renewals are answered by their events or rejections on the events topic, and its granted
    requests by their WorkAssigned on the assignments topic, as always."""

    batch_id: str
    gateway_id: str
    renewed: tuple[LeaseRenewed, ...] = ()
    progressed: tuple[ProgressReported, ...] = ()
    refused: tuple[NoWorkAvailable, ...] = ()


@dataclass(frozen=True)
class PoolStats:
    """One scheduler partition's view of one pool, published (compacted, keyed `pool/partition`) for
    admission control, ETA and the capacity manager. Sum over partitions for the pool's totals (counts;
    means and rates are per partition, weigh them by `leased`).
    `queued_by_tier` / `queued_by_tenant` entries read `priority=count` / `tenant=count`."""

    pool: str
    partition: int
    at_ms: int
    queued: int
    leased: int
    oldest_wait_ms: int
    queued_by_tier: tuple[str, ...] = ()
    queued_by_tenant: tuple[str, ...] = ()
    idle_workers: int = 0
    draining_workers: int = 0
    mean_run_ms: float = 0.0
    mean_checkpoint_interval_ms: float = 0.0
    # Workers holding a lease of this pool on this partition.
    active_workers: int = 0
    # Mean checkpoint write time reported by workers (RecordCheckpoint.duration_ms); 0.0 when none reported.
    mean_checkpoint_ms: float = 0.0
    # Leases of this pool lost (expired, or released for preemption) in the last hour, and per hour of
    # leased time in that hour (MTBF in hours = 1 / rate; 0.0 when nothing was lost).
    lease_losses_1h: int = 0
    lease_loss_rate_per_hour: float = 0.0
    # The smallest fair share (usage / weight, usage over all partitions) among the tenants with queued jobs
    # of this pool here that are below their in-flight ceiling; None when there is none. Requesters ask the
    # partition with the smallest first, so the pool's next free worker goes to the tenant furthest below
    # its share wherever its jobs are (dispatch/order.py).
    min_share: float | None = None
    # Seconds of this pool's leases held here within the last hour: the exposure `lease_losses_1h` were
    # counted over, so a worker can weigh the measured loss rate against its prior (worker/interval.py).
    leased_seconds_1h: float = 0.0
    # Of `idle_workers`, those with this pool's model loaded (RequestWork.warm_models); the others would
    # switch models (unload, load) to take a job here, which the ETA counts. None: not reported.
    warm_idle_workers: int | None = None
    # Priority/fair-share preemption (services/scheduler/preempting.py): leases of this pool here asked to
    # yield and not yet ended, and the requests made for this pool here in the last minute, so that every
    # scheduler instance counts the others' requests against the pool's budget and its waiting work.
    preempting: int = 0
    preempted_1m: int = 0
    # The queue as dispatch orders it (domain/queue_order.py), for the gateway's queue position and ETA:
    # queued jobs per `priority/tenant=count`, and per tenant `tenant=usage/weight/room` (GPU-seconds over
    # all partitions, plan weight, leases it may still take under its ceiling, empty for no ceiling).
    queued_by_tier_tenant: tuple[str, ...] = ()
    tenant_standing: tuple[str, ...] = ()
    # Leases of this pool here that may be asked back now, `priority=count` (preempting.py: the owner of the
    # lowest partition holding one decides the pool's preemptions, so two instances do not both spend the budget).
    preemptible_by_tier: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkerLeaseHeld:
    """The lease a worker holds, published by the partition that granted it (compacted
    `<prefix>.worker-leases`, key worker id), so that no partition grants that worker a second one. `held`
    false: that lease ended. Not part of any job's history."""

    worker_id: str
    job_id: str
    epoch: int
    partition: int
    granted_at_ms: int
    held: bool = True


@dataclass(frozen=True)
class TenantUsageReport:
    """One partition's usage by one tenant (compacted `<prefix>.tenant-usage`, key `tenant/partition`),
    published by the partition's owner whenever it changes (a lease granted or ended); every scheduler
    instance sums the reports of a tenant for the fair share across partitions.
    `consumed_gpu_seconds`: GPU-seconds of the ended leases, decayed to `at_ms` by the scheduler's half-life;
    `in_flight_gpu_seconds`: the held leases' estimated GPU-seconds (each its pool's mean run time);
    `used_gpu_seconds`: the ended leases' GPU-seconds without decay; `wasted_gpu_seconds`: of those, the time
    after a lease's newest checkpoint when it ended without success (`JobState.wasted_ms`: work redone by a
    next lease, or lost with the job), without decay. Not part of any job's history."""

    tenant: str
    partition: int
    at_ms: int
    consumed_gpu_seconds: float
    in_flight: int
    in_flight_gpu_seconds: float
    used_gpu_seconds: float = 0.0
    wasted_gpu_seconds: float = 0.0


@dataclass(frozen=True)
class TenantSettings:
    """A tenant's plan as dispatch needs it (compacted `<prefix>.tenants`, key tenant id), published by
    `spotreel tenant create|set` after the Cassandra row is written; the scheduler reads the whole topic and
    applies a change without a restart. `max_in_flight` None: no ceiling on concurrent leases."""

    tenant: str
    plan: str
    weight: float
    rate_per_minute: int
    max_priority: int
    at_ms: int
    max_in_flight: int | None = None


SCHEDULER_RECORDS = (WorkAssigned, NoWorkAvailable, PoolStats, WorkerLeaseHeld, TenantUsageReport, TenantSettings)
