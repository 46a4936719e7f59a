"""Deleting objects by key or by a job's prefix, idempotently (S3 answers a delete of a missing key with
success, so a re-run after a crash repeats harmlessly)."""

from __future__ import annotations

from typing import Iterable, Iterator

BATCH = 1000  # the most keys one DeleteObjects takes


def keys_under(s3, bucket: str, prefix: str) -> Iterator[str]:
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            yield obj["Key"]


def children(s3, bucket: str, prefix: str) -> Iterator[str]:
    """The next path segment under `prefix` (`prefix` ends in "/"): job ids under `ckpt/` or `videos/`."""
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
        for common in page.get("CommonPrefixes", []):
            name = common["Prefix"][len(prefix):].rstrip("/")
            if name:
                yield name


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
