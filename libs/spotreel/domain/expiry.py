"""When stored objects may go: a job's checkpoints, and a succeeded job's video under its tenant's plan.

The janitor (services/janitor) deletes by these rules and the gateway answers 410 Gone by the same
`video_expires_at_ms`, so what the API says and what the bucket holds cannot disagree for long.

Checkpoints only ever serve a job that can still run:
* keys a CheckpointRecorded prunes (out of the keep-newest-N window) are never loaded again: at once;
* a succeeded or cancelled job never runs again: all of its checkpoints at once;
* a failed or dead-lettered job can be retried (RequeueJob) until the scheduler evicts it, which happens
  `retention_s` after its last change (domain/retention.py): its checkpoints go at that same moment, so
  a retry inside the window still resumes from them and none outside it can be accepted;
* a job in any other status is alive (queued, leased, paused...): kept.

Videos: a plan's `video_retention_days` after the job succeeded (its last change); a tenant without a
plan (``custom``) keeps its videos. The plan is the tenant's plan when the rule is applied, so a tenant
that moves to a longer plan keeps videos the shorter one had not yet removed.
"""

from __future__ import annotations

from spotreel.domain.state import Status

DAY_MS = 86_400_000

# Days a succeeded job's video is kept, per plan (domain/plans.py); a plan missing here keeps videos.
VIDEO_RETENTION_DAYS: dict[str, int] = {"free": 7, "pro": 30, "enterprise": 365}

_AT_ONCE = frozenset({Status.SUCCEEDED, Status.CANCELLED})
_RETRYABLE = frozenset({Status.FAILED, Status.DEAD_LETTERED})


def checkpoints_expire_at_ms(status: str, updated_at_ms: int, retention_s: int) -> int | None:
    """The instant from which every checkpoint of a job in `status` (last changed at `updated_at_ms`) may be
    deleted; None while the job may still run."""
    if status in _AT_ONCE:
        return updated_at_ms
    if status in _RETRYABLE:
        return updated_at_ms + max(0, retention_s) * 1000
    return None


def video_retention_ms(plan: str | None) -> int | None:
    days = VIDEO_RETENTION_DAYS.get(plan) if plan is not None else None
    return None if days is None else days * DAY_MS


def video_expires_at_ms(status: str, finished_at_ms: int | None, plan: str | None) -> int | None:
    """When a job's video stops being served and may be deleted; None: it does not expire (not succeeded,
    no finish time, or a plan without retention)."""
    keep = video_retention_ms(plan)
    if status != Status.SUCCEEDED or finished_at_ms is None or keep is None:
        return None
    return finished_at_ms + keep


def due(expires_at_ms: int | None, now_ms: int) -> bool:
    return expires_at_ms is not None and expires_at_ms <= now_ms
