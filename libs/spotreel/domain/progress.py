"""Progress that stays honest across preemption and resume.

A worker reports `progress_pct` for the whole job. When a job resumes from a checkpoint at 40% after its
previous worker had reached 55%, the new worker's raw numbers restart at 40%. Showing 55% → 40% would look
like a bug; showing 55% while the worker silently redoes 40→55 would hide the lost work. So the state keeps:

  progress_pct     the high-water mark of every accepted report and checkpoint of this job. Never decreases
                   (a manual requeue included). 100 on success.
  reported_pct     the latest raw figure of the current lease (starts at the resume checkpoint's figure,
                   or 0 without one). May be below progress_pct.
  resuming         true from a lease that starts below the high-water mark until a report of that lease
                   reaches it (reported_pct >= progress_pct); a lease that starts at or above the mark is
                   not resuming.
  resume_from_pct  while resuming: where the lease restarted (the checkpoint's figure, 0.0 with no
                   checkpoint). The API shows "resuming from checkpoint at {resume_from_pct}%", and
                   reported_pct / progress_pct show how far the catch-up got.
  phase            "pending" before any lease, "starting" on a fresh lease, "resuming" while resuming,
                   otherwise the phase of the last report ("denoising", "encoding", ...), "interrupted" once a
                   lease ended without success (lost, released, failed; until the next lease), "done" on
                   success. A lease that never reached a worker (released as unclaimed) interrupted
                   nothing: "pending" again if the job has no progress yet, else "interrupted".

These are computed in `evolve` from the figures the events carry, so replay gives the same view.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from spotreel.domain.records import replace
from spotreel.domain.state import JobState


@dataclass(frozen=True)
class ProgressView:
    progress_pct: float
    reported_pct: float
    step: int
    phase: str
    resuming: bool
    resume_from_pct: float | None


def valid_pct(value: float) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and 0.0 <= value <= 100.0


def on_lease(state: JobState, resume_pct: float | None, resume_step: int | None) -> JobState:
    start = resume_pct if resume_pct is not None else 0.0
    resuming = start < state.progress_pct
    return replace(
        state,
        reported_pct=start,
        step=resume_step if resume_step is not None else 0,
        resuming=resuming,
        resume_from_pct=start if resuming else None,
        phase="resuming" if resuming else "starting",
    )


def on_report(state: JobState, pct: float, step: int, phase: str) -> JobState:
    """Applied for ProgressReported (with the worker's phase) and CheckpointRecorded (phase unchanged)."""
    caught_up = pct >= state.progress_pct
    resuming = state.resuming and not caught_up
    return replace(
        state,
        reported_pct=pct,
        step=step,
        progress_pct=max(state.progress_pct, pct),
        resuming=resuming,
        resume_from_pct=state.resume_from_pct if resuming else None,
        phase="resuming" if resuming else phase,
    )


def on_unclaimed(state: JobState) -> JobState:
    """A lease handed back because it never reached a worker: nothing ran, so nothing was interrupted."""
    return replace(state, reported_pct=state.progress_pct, resuming=False, resume_from_pct=None,
                   phase="pending" if state.progress_pct == 0.0 else "interrupted")


def on_lease_end(state: JobState) -> JobState:
    """The lease is gone (lost, released, failed): no catch-up is in progress any more."""
    return replace(state, resuming=False, resume_from_pct=None, phase="interrupted")


def on_success(state: JobState) -> JobState:
    return replace(
        state, progress_pct=100.0, reported_pct=100.0, resuming=False, resume_from_pct=None, phase="done"
    )


def view(state: JobState) -> ProgressView:
    return ProgressView(
        progress_pct=state.progress_pct,
        reported_pct=state.reported_pct,
        step=state.step,
        phase=state.phase,
        resuming=state.resuming,
        resume_from_pct=state.resume_from_pct,
    )
