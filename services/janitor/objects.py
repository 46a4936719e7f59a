"""Deleting objects by key or by a job's prefix, idempotently (S3 answers a delete of a missing key with
success, so a re-run after a crash repeats harmlessly)."""

from __future__ import annotations

from typing import Iterable, Iterator

BATCH = 1000  # the most keys one DeleteObjects takes


def keys_under(s3, bucket: str, prefix: str) -> Iterator[str]:
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            yield obj["Key"]


def by_job(s3, bucket: str, prefix: str) -> Iterator[tuple[str, list[str]]]:
    """(job id, its keys) for each job under `prefix` (which ends in "/") that still holds an object, from
    one flat listing. Not Delimiter="/": SeaweedFS keeps a directory whose objects were all deleted and
    lists it as a common prefix for good, which would cost the sweep a read-model lookup per long-gone job
    on every pass. A listing is in key order, so a job's keys are consecutive."""
    job, keys = None, []
    for key in keys_under(s3, bucket, prefix):
        rest = key[len(prefix):]
        if "/" not in rest:
            continue  # not under a job's directory
        name = rest.split("/", 1)[0]
        if name != job:
            if job is not None:
                yield job, keys
            job, keys = name, []
        keys.append(key)
    if job is not None:
        yield job, keys


def delete_keys(s3, bucket: str, keys: Iterable[str]) -> int:
    """Deletes the keys (missing ones are fine); raises on any per-key error so the caller retries."""
    todo = list(dict.fromkeys(keys))
    for start in range(0, len(todo), BATCH):
        batch = [{"Key": k} for k in todo[start:start + BATCH]]
        answer = s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
        errors = [e for e in answer.get("Errors", []) if e.get("Code") != "NoSuchKey"]
        if errors:
            raise RuntimeError(f"could not delete {len(errors)} object(s) from {bucket}: {errors[0]}")
    return len(todo)


def delete_prefix(s3, bucket: str, prefix: str) -> int:
    if not prefix.endswith("/"):
        raise ValueError(f"a prefix to delete must end in '/', got {prefix!r}")
    return delete_keys(s3, bucket, list(keys_under(s3, bucket, prefix)))
