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
          plan_of: Callable[[str], str | None], retention_s: int, now_ms: int) -> SweepResult:
    out = SweepResult()
    for job_id in list(objects.children(s3, checkpoint_bucket, CHECKPOINTS)):
        out.jobs_seen += 1
        facts = job(job_id)
        if facts is None or facts.updated_at_ms is None:
            continue
        if expiry.due(expiry.checkpoints_expire_at_ms(facts.status, facts.updated_at_ms, retention_s), now_ms):
            out.objects_deleted += objects.delete_prefix(s3, checkpoint_bucket, f"{CHECKPOINTS}{job_id}/")
            out.checkpoint_jobs_cleared += 1
    plans: dict[str, str | None] = {}
    for job_id in list(objects.children(s3, artifact_bucket, VIDEOS)):
        out.jobs_seen += 1
        facts = job(job_id)
        if facts is None:
            continue
        if facts.tenant_id not in plans:
            plans[facts.tenant_id] = plan_of(facts.tenant_id)
        if expiry.due(expiry.video_expires_at_ms(facts.status, facts.updated_at_ms, plans[facts.tenant_id]), now_ms):
            out.objects_deleted += objects.delete_prefix(s3, artifact_bucket, f"{VIDEOS}{job_id}/")
            out.videos_expired += 1
    return out
