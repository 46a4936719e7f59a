"""The state of one job: what `evolve` builds from its events and what `decide` judges commands against.

State is never stored as the system of record (events are); it is a cache that can be rebuilt with
`evolve.fold`. It may therefore hold nested dataclasses and tuples of tuples that messages may not.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotreel.domain.spec import RenderSpec


class Status:
    # Only between JobSubmitted and the JobQueued/JobScheduled/JobWaiting that `decide` always emits with
    # it in the same batch, so nobody observes it after a batch is applied.
    SUBMITTED = "submitted"
    SCHEDULED = "scheduled"
    WAITING = "waiting"
    QUEUED = "queued"
    LEASED = "leased"
    RUNNING = "running"
    PAUSED = "paused"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DEAD_LETTERED = "dead_lettered"

    TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED, DEAD_LETTERED})
    HOLDING_LEASE = frozenset({LEASED, RUNNING})
    REQUEUEABLE = frozenset({FAILED, DEAD_LETTERED})
    # Nothing runs yet, so a cancel or pause takes effect at once.
    IDLE = frozenset({SUBMITTED, SCHEDULED, WAITING, QUEUED})


@dataclass(frozen=True)
class Lease:
    epoch: int
    worker_id: str
    pool: str
    granted_at_ms: int
    ttl_ms: int
    expires_at_ms: int
    # The holder has sent a command under this lease (renewal, progress, checkpoint), so it did receive it.
    # Until then a lease may be handed back as never delivered (leases.UNCLAIMED) at no cost to the job.
    confirmed: bool = False
    # The holder's fingerprint (resume_match.py; "" unknown) and the step the lease resumed from (None: step 0).
    # Checkpoints recorded under the lease carry the fingerprint; a new one must be beyond what the lease
    # started from and its own earlier ones.
    fingerprint: str = ""
    resume_step: int | None = None


@dataclass(frozen=True)
class Checkpoint:
    key: str
    step: int
    progress_pct: float
    epoch: int
    checksum: str
    size_bytes: int
    at_ms: int
    # The environment that can resume it exactly (resume_match.py); "" unknown: any worker may try.
    fingerprint: str = ""


@dataclass(frozen=True)
class JobState:
    job_id: str
    version: int
    status: str
    submitted_at_ms: int
    updated_at_ms: int

    # What was asked for (from JobSubmitted; priority may change later).
    tenant: str
    idempotency_key: str
    request_hash: str
    gpu_type: str
    pool: str
    spec: RenderSpec
    priority: int
    callback_url: str | None
    parents: tuple[str, ...]
    dag_policy: str
    max_attempts: int
    max_preemptions: int
    keep_checkpoints: int
    backoff_base_ms: int
    backoff_max_ms: int
    poison_threshold: int
    poison_window_ms: int
    schedule_id: str | None
    occurrence_ms: int | None
    # Time limits (limits.py): rendering time across attempts (None: none) and the stuck rule.
    timeout_ms: int | None = None
    stuck_steps: int = 10
    stuck_min_ms: int = 120_000

    # Not runnable before this (the submitted run_at, later a retry backoff's end).
    run_at_ms: int | None = None

    # Leases. `epoch` is the highest ever issued for this job, so the next lease gets epoch + 1 and an
    # epoch is never reused, whatever happens in between. `lease` is set exactly while leased/running.
    epoch: int = 0
    lease: Lease | None = None
    attempt: int = 0

    # Rendering time of the ended leases (limits.py; reset by a manual requeue), and the stuck rule's marks of
    # the current lease: the step it started at, and (step, at_ms) of its latest step advance (the grant
    # until a step advances; None in the finishing phases or without a lease).
    render_ms: int = 0
    # Of that, the time of ended leases after their newest checkpoint, when they ended without success (a lost,
    # failed, released or cancelled lease): work a next lease redoes, or that was lost with the job. Never
    # reset (a manual requeue keeps it: it was spent).
    wasted_ms: int = 0
    step_origin: int = 0
    step_mark: tuple[int, int] | None = None

    # Retry accounting (reset by a manual requeue).
    attempts_used: int = 0
    preemptions: int = 0
    recent_failures_ms: tuple[int, ...] = ()
    last_error_code: str | None = None
    last_error_message: str | None = None

    # In step order; at most keep_checkpoints of them; the last one is the newest (resume_point). A lease
    # resumes from the newest its worker can use (resume_match.choose_resume).
    checkpoints: tuple[Checkpoint, ...] = ()

    # Progress, see progress.py for the exact semantics.
    progress_pct: float = 0.0
    reported_pct: float = 0.0
    step: int = 0
    phase: str = "pending"
    resuming: bool = False
    resume_from_pct: float | None = None

    # DAG.
    pending_parents: tuple[str, ...] = ()
    parent_outcomes: tuple[tuple[str, str], ...] = ()
    # Children waiting for this job to end (ParentWatched): each gets a ResolveParent when it is terminal.
    watchers: tuple[str, ...] = ()

    # A cancel or pause asked of a leased job, waiting for the lease to end.
    cancel_requested: bool = False
    cancel_reason: str | None = None
    pause_requested: bool = False
    pause_reason: str | None = None
    # The scheduler asked the holder to checkpoint and release for higher-tier work (PreemptRequested), and
    # whether the job's previous lease ended that way (a job is never preempted twice in a row).
    preempt_requested: bool = False
    preempted_last: bool = False

    # Outcome.
    terminal_reason: str | None = None
    artifact_key: str | None = None
    artifact_checksum: str | None = None
    artifact_size_bytes: int | None = None

    # A summary left in the scheduler's table after a terminal job was evicted from it (retention.py): only
    # status, version, epoch, request_hash, tenant and updated_at_ms are set.
    evicted: bool = False

    @property
    def is_terminal(self) -> bool:
        return self.status in Status.TERMINAL

    @property
    def resume_point(self) -> Checkpoint | None:
        return self.checkpoints[-1] if self.checkpoints else None

    def lease_valid_at(self, now_ms: int) -> bool:
        return self.lease is not None and now_ms < self.lease.expires_at_ms
