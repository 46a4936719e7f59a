"""The whole-system chaos test's judge: every job's history on the events topic, folded and checked.

Pure (no I/O), so a unit test can show that each check fires on a history that breaks it.

Per job:
- accepted events carry versions 1, 2, 3… with no gap and no repeat (a lost or duplicated event shows);
- exactly one terminal event, and nothing accepted after it;
- fencing: each JobLeased takes the next epoch; every accepted event that names an epoch (the worker's
  renewals, progress, checkpoints, releases, failures, completion, and the owner's LeaseExpired) names
  the epoch of the lease that was valid just before it; so no state change came from an old epoch;
- side effects: a recorded checkpoint and the completed video are keys under the event's own epoch.
Rejections are counted by reason; a stale write is a rejection of a command whose epoch was not the
job's live lease.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from spotreel.domain import events as ev
from spotreel.domain.evolve import evolve

TERMINAL = (ev.JobSucceeded, ev.JobFailed, ev.JobCancelled, ev.JobDeadLettered)
FENCED = (ev.LeaseRenewed, ev.ProgressReported, ev.CheckpointRecorded, ev.LeaseReleased, ev.AttemptFailed,
          ev.JobSucceeded, ev.LeaseExpired)
STALE_REASONS = frozenset({"stale_epoch", "lease_expired", "unknown_epoch", "worker_mismatch", "terminal"})


def epoch_dir(epoch: int) -> str:
    return f"/e{epoch:08d}/"


@dataclass
class JobAudit:
    job_id: str
    terminal: list[Any] = field(default_factory=list)
    leases: list[ev.JobLeased] = field(default_factory=list)
    rejected: list[ev.CommandRejected] = field(default_factory=list)
    fenced_applied: int = 0
    kinds: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    @property
    def succeeded(self) -> ev.JobSucceeded | None:
        return next((e for e in self.terminal if isinstance(e, ev.JobSucceeded)), None)

    @property
    def resumes(self) -> int:
        return sum(1 for le in self.leases if le.resume_checkpoint_key)

    @property
    def stale_rejections(self) -> list[ev.CommandRejected]:
        return [r for r in self.rejected if r.epoch_given is not None and r.reason in STALE_REASONS]


def audit_job(job_id: str, history: Iterable[Any]) -> JobAudit:
    a = JobAudit(job_id)
    state = None
    expected_version = 1
    for e in history:
        if isinstance(e, ev.CommandRejected):
            a.rejected.append(e)
            continue
        name = type(e).__name__
        a.kinds[name] += 1
        if e.version != expected_version:
            a.problems.append(f"{name} has version {e.version}, expected {expected_version} (lost or duplicated)")
        expected_version = e.version + 1
        if a.terminal:
            a.problems.append(f"{name} v{e.version} accepted after the terminal {type(a.terminal[0]).__name__}")
        if isinstance(e, ev.JobLeased):
            a.leases.append(e)
            before = state.epoch if state is not None else 0
            if e.epoch != before + 1:
                a.problems.append(f"JobLeased v{e.version} has epoch {e.epoch} after epoch {before}")
        if isinstance(e, FENCED):
            lease = state.lease if state is not None else None
            if lease is None or lease.epoch != e.epoch:
                live = lease.epoch if lease is not None else None
                a.problems.append(f"{name} v{e.version} applied for epoch {e.epoch} while the live lease was {live}")
            a.fenced_applied += 1
        if isinstance(e, ev.CheckpointRecorded) and epoch_dir(e.epoch) not in e.checkpoint_key:
            a.problems.append(f"checkpoint {e.checkpoint_key} recorded for epoch {e.epoch}")
        if isinstance(e, ev.JobSucceeded) and epoch_dir(e.epoch) not in e.artifact_key:
            a.problems.append(f"video {e.artifact_key} completed for epoch {e.epoch}")
        if isinstance(e, TERMINAL):
            a.terminal.append(e)
        state = evolve(state, e)
    if state is None:
        a.problems.append("no JobSubmitted")
    if len(a.terminal) != 1:
        a.problems.append(f"{len(a.terminal)} terminal events: {[type(t).__name__ for t in a.terminal]}")
    return a


@dataclass
class Audit:
    jobs: dict[str, JobAudit]

    @property
    def problems(self) -> list[str]:
        return [f"{j}: {p}" for j, a in self.jobs.items() for p in a.problems]

    def outcomes(self) -> Counter:
        return Counter(type(a.terminal[0]).__name__ if len(a.terminal) == 1 else f"{len(a.terminal)} terminals"
                       for a in self.jobs.values())

    def rejections(self) -> Counter:
        return Counter(r.reason for a in self.jobs.values() for r in a.rejected)

    def stale_rejections(self) -> int:
        return sum(len(a.stale_rejections) for a in self.jobs.values())

    def total(self, attr: str) -> int:
        return sum(getattr(a, attr) for a in self.jobs.values())

    def kinds(self) -> Counter:
        return sum((a.kinds for a in self.jobs.values()), Counter())


def audit(events: Iterable[Any], job_ids: Iterable[str]) -> Audit:
    """`events`: the events topic in partition order (a job's events share a partition, so they are in order)."""
    by_job: dict[str, list[Any]] = {j: [] for j in job_ids}
    for e in events:
        job = getattr(e, "job_id", None)
        if job in by_job:
            by_job[job].append(e)
    return Audit({j: audit_job(j, h) for j, h in by_job.items()})
