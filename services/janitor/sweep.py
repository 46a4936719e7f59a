"""The janitor's periodic sweep: walk the job prefixes in the checkpoint and artifact buckets and delete
those whose time has come (domain/expiry.py), judged by the read model.

The sweep keeps no state of its own, so a restart loses nothing: what was due and not yet deleted is due
again on the next pass. It is what removes the checkpoints of failed and dead-lettered jobs (a day after
the failure, when the scheduler stops accepting a retry) and expired videos, and it repairs anything the
event path missed (e.g. checkpoints written by a stale worker after the job ended). A job the read model
does not know (not projected yet, or from another keyspace) is left alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from spotreel.domain import expiry
from spotreel.services.janitor import objects

log = logging.getLogger("spotreel.janitor")

CHECKPOINTS = "ckpt/"  # worker/checkpoints.py: ckpt/{job_id}/e{epoch}/s{step}.ckpt
VIDEOS = "videos/"  # domain/ids.artifact_key: videos/{job_id}/e{epoch}/video.mp4


@dataclass(frozen=True)
class JobFacts:
    """What the sweep needs of a job's read-model row."""

    status: str
    updated_at_ms: int | None
    tenant_id: str


@dataclass
class SweepResult:
    jobs_seen: int = 0
    checkpoint_jobs_cleared: int = 0
    videos_expired: int = 0
    objects_deleted: int = 0


def sweep(s3, checkpoint_bucket: str, artifact_bucket: str, job: Callable[[str], JobFacts | None],
          plan_of: Callable[[str], str | None], retention_s: int, now_ms: int,
          stopping: Callable[[], bool] = lambda: False) -> SweepResult:
    """`stopping` is asked before each job, so a shutdown need not wait for a long pass; what was not
    reached is due again next time."""
    plans: dict[str, str | None] = {}

    def checkpoints_due(facts: JobFacts) -> bool:
        return expiry.due(expiry.checkpoints_expire_at_ms(facts.status, facts.updated_at_ms, retention_s), now_ms)

    def video_due(facts: JobFacts) -> bool:
        if facts.tenant_id not in plans:
            plans[facts.tenant_id] = plan_of(facts.tenant_id)
        plan = plans[facts.tenant_id]
        return expiry.due(expiry.video_expires_at_ms(facts.status, facts.updated_at_ms, plan), now_ms)

    out = SweepResult()
    seen, cleared, deleted = _pass(s3, checkpoint_bucket, CHECKPOINTS, job, checkpoints_due, stopping)
    out.jobs_seen, out.checkpoint_jobs_cleared, out.objects_deleted = seen, cleared, deleted
    if not stopping():
        seen, cleared, deleted = _pass(s3, artifact_bucket, VIDEOS, job, video_due, stopping)
        out.jobs_seen, out.videos_expired, out.objects_deleted = out.jobs_seen + seen, cleared, out.objects_deleted + deleted
    return out


def _pass(s3, bucket: str, prefix: str, job: Callable[[str], JobFacts | None], is_due: Callable[[JobFacts], bool],
          stopping: Callable[[], bool]) -> tuple[int, int, int]:
    """One bucket: (jobs seen, jobs whose objects went, objects deleted). Due keys are deleted 1,000 to a
    call as the listing goes."""
    seen = cleared = deleted = 0
    doomed: list[str] = []
    for job_id, keys in objects.by_job(s3, bucket, prefix):
        if stopping():
            break
        seen += 1
        facts = job(job_id)
        if facts is None or facts.updated_at_ms is None or not is_due(facts):
            continue
        cleared += 1
        doomed.extend(keys)
        if len(doomed) >= objects.BATCH:
            deleted += objects.delete_keys(s3, bucket, doomed)
            doomed = []
    deleted += objects.delete_keys(s3, bucket, doomed)
    return seen, cleared, deleted
