"""Bounded state: when a finished job leaves the scheduler's table, and what it still answers afterwards.

Without this the table (and its compacted changelog) holds every job ever submitted: at 100,000 jobs a day,
memory that only grows. A terminal job is therefore evicted `retention_ms` after its last change; the
events topic keeps its whole history (`spotreel replay`). In its place the table keeps a *summary*: a
`JobState` with `evicted=True` that holds only what later commands can still need of the job:

- `request_hash`: a re-sent SubmitJob (a client's retry, a cron occurrence's follow-up sent again after a
  crash) is still the same no-op, and a different request under the same key is still refused;
- `status` (the outcome): a child submitted later (WatchParent) learns the outcome, so a child of an evicted
  succeeded parent runs instead of being cancelled as the child of an unknown job;
- `version` (and `epoch`): events a late command still appends to the job's history are numbered after it,
  and a refusal names the same epoch as before.

Every other command is refused (`evicted`): an evicted failed job can no longer be requeued. The summary is
itself forgotten `summary_retention_ms` after the job's last change; from then on the id is unknown again (a
resubmission creates a new job, a child is cancelled as for an unknown parent). So idempotency and late
children are honoured for the summary retention, not forever.

Pure: the scheduler decides *when* with its own clock and does the table writes (services/scheduler).
"""

from __future__ import annotations

from dataclasses import dataclass

from spotreel.domain import commands as cmd
from spotreel.domain import events as ev
from spotreel.domain import ids
from spotreel.domain.outcomes import Head, Reason, rejected
from spotreel.domain.spec import RenderSpec
from spotreel.domain.state import JobState

DAY_MS = 86_400_000


@dataclass(frozen=True)
class Retention:
    """How long a terminal job stays whole in the table, and its summary after it (both counted from the
    job's last change)."""

    retention_ms: int = DAY_MS
    summary_retention_ms: int = 3 * DAY_MS

    def __post_init__(self) -> None:
        if self.retention_ms < 0 or self.summary_retention_ms < self.retention_ms:
            raise ValueError("need 0 <= retention_ms <= summary_retention_ms")


def evict_at(state: JobState | None, policy: Retention) -> int | None:
    """When the job may leave the table: `retention_ms` after its last change, once terminal. None for a live
    job, an unknown one and a summary (already evicted)."""
    if state is None or state.evicted or not state.is_terminal:
        return None
    return state.updated_at_ms + policy.retention_ms


def forget_at(summary: JobState, policy: Retention) -> int | None:
    """When a summary leaves the table too (None for a job that is not a summary)."""
    if not summary.evicted:
        return None
    return summary.updated_at_ms + policy.summary_retention_ms


def summarize(state: JobState) -> JobState:
    """The summary kept for an evicted terminal job: outcome, version, request hash, tenant, time of the
    last change and the last lease epoch (refusals name it); everything else empty."""
    if not state.is_terminal:
        raise ValueError(f"{state.job_id} is {state.status}: only a terminal job is evicted")
    return summary(state.job_id, state.status, state.version, state.request_hash, state.updated_at_ms,
                   state.tenant, state.epoch)


# A summary keeps no request: its spec is empty (nothing reads it; the job no longer renders).
_NO_SPEC = RenderSpec(model="", prompt="", duration_s=0.0, resolution="", fps=0, seed=0, num_steps=0)


def summary(job_id: str, status: str, version: int, request_hash: str, updated_at_ms: int,
            tenant: str = "", epoch: int = 0) -> JobState:
    """A summary from its stored fields (the scheduler keeps them in a compact form)."""
    return JobState(
        job_id=job_id, version=version, status=status, submitted_at_ms=updated_at_ms,
        updated_at_ms=updated_at_ms, tenant=tenant, idempotency_key="", request_hash=request_hash,
        gpu_type="", pool="", spec=_NO_SPEC, priority=0,
        callback_url=None, parents=(), dag_policy="", max_attempts=0, max_preemptions=0, keep_checkpoints=0,
        backoff_base_ms=0, backoff_max_ms=0, poison_threshold=0, poison_window_ms=0, schedule_id=None,
        occurrence_ms=None, epoch=epoch, evicted=True)


def decide_evicted(state: JobState, command: object, h: Head, now_ms: int) -> tuple[object, ...]:
    """What an evicted job answers (`decide` numbers the events): a SubmitJob of the same request is a no-op,
    of another request under the same key refused; WatchParent gets the outcome; the rest `evicted`."""
    if isinstance(command, cmd.SubmitJob):
        same = (command.request_hash == state.request_hash
                and command.job_id == ids.job_id_for(command.tenant, command.idempotency_key))
        return () if same else rejected(state, command, now_ms, Reason.IDEMPOTENCY_KEY_REUSED,
                                        "same key, different request")
    if isinstance(command, cmd.WatchParent):
        return (h.event(ev.ParentWatched, child_id=command.child_id, status=state.status),)
    return rejected(state, command, now_ms, Reason.EVICTED,
                    f"job is {state.status} and was evicted from the scheduler's table")

