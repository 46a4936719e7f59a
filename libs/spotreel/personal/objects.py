"""The S3 prefixes that hold one job's objects, by bucket: what erasing a job deletes.

Thumbnails and spritesheets are made from the MP4 when asked for (spotreel/previews.py) and never stored, so
the video's prefix is all there is of them. A job input stored in S3 (an input image) is erased by adding
its prefix here.
"""

from __future__ import annotations

from typing import Any


def job_prefixes(settings: Any, job_id: str) -> list[tuple[str, str]]:
    """(bucket, prefix) of every object the job may have, each prefix ending in "/"."""
    return [(settings.s3_bucket_artifacts, f"videos/{job_id}/"),
            (settings.s3_bucket_checkpoints, f"ckpt/{job_id}/")]


def delete_job_objects(s3: Any, settings: Any, job_id: str) -> int:
    """Delete every object under the job's prefixes; how many. Idempotent (a second run finds none)."""
    n = 0
    for bucket, prefix in job_prefixes(settings, job_id):
        keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
                for o in page.get("Contents", [])]
        for start in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[start:start + 1000]]
            answer = s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
            errors = [e for e in answer.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                raise RuntimeError(f"could not delete {len(errors)} object(s) of {job_id} from {bucket}")
        n += len(keys)
    return n
