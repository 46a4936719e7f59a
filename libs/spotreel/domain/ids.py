"""Deterministic identifiers: job ids, request hashes, pool keys and object keys.

Job ids are derived, never drawn at random, so that the same (tenant, idempotency key) always lands on the
same job and the same Kafka partition: a client retrying a POST, a gateway crashing after producing, or a
cron timer firing twice all resolve to one job.

    job_id = "j" + hex(sha256("spotreel/job/v1" NUL tenant NUL idempotency_key))[:32]

A 128-bit prefix of SHA-256 (33 characters, URL-safe). The "v1" salt is part of the contract: changing it
would change every id, so it must never change. The NUL separator is unambiguous because `decide` refuses a
SubmitJob whose tenant or idempotency key contains NUL.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()


def job_id_for(tenant: str, idempotency_key: str) -> str:
    return "j" + _digest("spotreel/job/v1", tenant, idempotency_key)[:32]


def schedule_id_for(tenant: str, idempotency_key: str) -> str:
    """The schedule a tenant's POST /v1/schedules with this Idempotency-Key creates:
    "s" + hex(sha256("spotreel/schedule/v1" NUL tenant NUL key))[:32]."""
    return "s" + _digest("spotreel/schedule/v1", tenant, idempotency_key)[:32]


def occurrence_idempotency_key(schedule_id: str, occurrence_ms: int) -> str:
    """The idempotency key under which a cron schedule submits the job for one occurrence."""
    return f"schedule:{schedule_id}:{occurrence_ms}"


def job_id_for_occurrence(tenant: str, schedule_id: str, occurrence_ms: int) -> str:
    return job_id_for(tenant, occurrence_idempotency_key(schedule_id, occurrence_ms))


def request_hash(body: Mapping[str, object]) -> str:
    """SHA-256 of the canonical JSON of a request body (sorted keys, no whitespace, UTF-8).

    Callers pass what the client sent (after defaults are applied), without the idempotency key itself."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def pool_key(model: str, gpu_type: str) -> str:
    """The string form of a pool (model version x GPU type) used in messages such as GrantLease.pool."""
    return f"{model}@{gpu_type}"


def checkpoint_key(job_id: str, epoch: int, step: int) -> str:
    """Object key for a checkpoint. The epoch is part of it so a stale worker can never overwrite the
    object a newer lease recorded; only the key an accepted CheckpointRecorded names is ever read."""
    return f"checkpoints/{job_id}/e{epoch:08d}/s{step:08d}"


def artifact_key(job_id: str, epoch: int) -> str:
    return f"videos/{job_id}/e{epoch:08d}/video.mp4"


def deterministic_fraction(*parts: str) -> float:
    """A number in [0, 1) fixed by its inputs: the seedless stand-in for randomness (retry jitter)."""
    return int(_digest("spotreel/fraction/v1", *parts)[:13], 16) / float(1 << 52)
