"""Checkpoints of a render: the format (safetensors + JSON, never pickle) and their S3 store.

An encoded checkpoint is one blob:

    b"SRCKPT1\\n" | 32-byte sha256 of the payload | payload

where the payload is a plain safetensors file whose `__metadata__` holds one JSON document under
"spotreel" (step, fingerprint, meta). The checksum guards the whole payload, so a truncated object, a
flipped byte in a tensor, in the JSON or even in the header padding is caught before anything is used;
strip the first 40 bytes and any safetensors tool reads the rest.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

MAGIC = b"SRCKPT1\n"
_DIGEST = 32
_HEADER = len(MAGIC) + _DIGEST
FORMAT_VERSION = 1


class CheckpointError(Exception):
    """Base of the typed checkpoint errors; the runtime falls back to an older checkpoint or step 0."""


class CheckpointCorrupt(CheckpointError):
    """The bytes are not the checkpoint that was written (checksum, truncation, bad framing or JSON)."""


class CheckpointMismatch(CheckpointError):
    """A sound checkpoint of something else: another model, another request, or another loop version."""


@dataclass(frozen=True)
class Checkpoint:
    step: int
    fingerprint: str
    tensors: dict[str, torch.Tensor]
    meta: dict[str, Any] = field(default_factory=dict)


def encode(ckpt: Checkpoint) -> bytes:
    if not isinstance(ckpt.step, int) or ckpt.step < 0:
        raise ValueError(f"checkpoint step must be a non-negative int, got {ckpt.step!r}")
    doc = {"format": FORMAT_VERSION, "step": ckpt.step, "fingerprint": ckpt.fingerprint, "meta": ckpt.meta}
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in ckpt.tensors.items()}
    payload = st_save(tensors, metadata={"spotreel": json.dumps(doc, sort_keys=True)})
    return MAGIC + hashlib.sha256(payload).digest() + payload


def checksum_of(data: bytes) -> str:
    """The checksum an encoded checkpoint carries (hex sha256 of its payload), read without decoding."""
    if len(data) < _HEADER or not data.startswith(MAGIC):
        raise CheckpointCorrupt("not a spotreel checkpoint (bad magic or too short)")
    return data[len(MAGIC):_HEADER].hex()


def decode(data: bytes) -> Checkpoint:
    stored = checksum_of(data)
    payload = data[_HEADER:]
    actual = hashlib.sha256(payload).hexdigest()
    if actual != stored:
        raise CheckpointCorrupt(f"checksum mismatch: header says {stored[:16]}…, payload hashes to {actual[:16]}…")
    # The checksum matched, so what follows only fails for a blob written by something other than encode().
    try:
        tensors = st_load(payload)
        header_len = int.from_bytes(payload[:8], "little")
        raw_meta = json.loads(payload[8:8 + header_len]).get("__metadata__", {})
        doc = json.loads(raw_meta["spotreel"])
        if doc.get("format") != FORMAT_VERSION:
            raise CheckpointCorrupt(f"unsupported checkpoint format {doc.get('format')!r}")
        return Checkpoint(step=int(doc["step"]), fingerprint=str(doc["fingerprint"]), tensors=tensors,
                          meta=dict(doc.get("meta") or {}))
    except CheckpointCorrupt:
        raise
    except Exception as exc:  # safetensors, JSON and key errors alike mean "not a checkpoint we can use"
        raise CheckpointCorrupt(f"unreadable checkpoint payload: {exc}") from exc


@dataclass(frozen=True)
class SavedCheckpoint:
    key: str
    checksum: str
    size_bytes: int


class CheckpointStore:
    """Checkpoints of every job in one bucket, under `{prefix}/{job_id}/e{epoch:08d}/s{step:06d}.ckpt`.

    The epoch in the key fences side effects (DESIGN §2.3): a stale worker's object can never overwrite
    the current owner's, and only the key that an accepted CheckpointRecorded event names is ever loaded.
    Zero-padded numbers keep a listing in (epoch, step) order.
    """

    def __init__(self, s3_client, bucket: str, prefix: str = "ckpt") -> None:
        if not bucket:
            raise ValueError("checkpoint bucket name is empty")
        self._s3 = s3_client
        self.bucket = bucket
        self.prefix = prefix.strip("/")

    def key_for(self, job_id: str, epoch: int, step: int) -> str:
        if not job_id or "/" in job_id:
            raise ValueError(f"job id {job_id!r} cannot be part of a checkpoint key")
        if epoch < 0 or step < 0:
            raise ValueError(f"epoch and step must be >= 0, got epoch={epoch} step={step}")
        return f"{self.prefix}/{job_id}/e{epoch:08d}/s{step:06d}.ckpt"

    def save(self, job_id: str, epoch: int, step: int, ckpt: Checkpoint) -> SavedCheckpoint:
        if ckpt.step != step:
            raise ValueError(f"checkpoint is at step {ckpt.step} but is being saved as step {step}")
        key = self.key_for(job_id, epoch, step)
        data = encode(ckpt)
        checksum = checksum_of(data)
        self._s3.put_object(
            Bucket=self.bucket, Key=key, Body=data, ContentType="application/octet-stream",
            Metadata={"checksum-sha256": checksum, "fingerprint": ckpt.fingerprint, "step": str(step),
                      "epoch": str(epoch)},
        )
        return SavedCheckpoint(key=key, checksum=checksum, size_bytes=len(data))

    def load(self, key: str, expected_checksum: str | None, fingerprint: str) -> Checkpoint:
        """Fetch, verify and decode. CheckpointCorrupt: missing object, bytes or checksum differ from what was
        recorded. CheckpointMismatch: a sound checkpoint for another model or request."""
        try:
            data = self._s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except self._s3.exceptions.NoSuchKey as exc:
            raise CheckpointCorrupt(f"checkpoint {key} is missing from bucket {self.bucket}") from exc
        ckpt = decode(data)
        if expected_checksum is not None and checksum_of(data) != expected_checksum:
            raise CheckpointCorrupt(f"checkpoint {key} has checksum {checksum_of(data)[:16]}…, "
                                    f"the recorded one is {expected_checksum[:16]}…")
        if ckpt.fingerprint != fingerprint:
            raise CheckpointMismatch(f"checkpoint {key} was made for fingerprint {ckpt.fingerprint[:16]}…, "
                                     f"this render is {fingerprint[:16]}…")
        return ckpt

    def list_keys(self, job_id: str) -> list[str]:
        keys: list[str] = []
        pages = self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                    Prefix=f"{self.prefix}/{job_id}/")
        for page in pages:
            keys.extend(obj["Key"] for obj in page.get("Contents", []))
        return sorted(keys)

    def prune(self, job_id: str, keep_keys: set[str]) -> int:
        """Delete every checkpoint of the job that is not in `keep_keys`; returns how many were deleted."""
        doomed = [k for k in self.list_keys(job_id) if k not in keep_keys]
        for start in range(0, len(doomed), 1000):
            batch = [{"Key": k} for k in doomed[start:start + 1000]]
            self._s3.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
        return len(doomed)

    def newest(self, job_id: str, n: int) -> list[str]:
        """The keys of the job's newest `n` checkpoints, newest first (for keep-N pruning)."""
        return list(reversed(self.list_keys(job_id)))[:n] if n > 0 else []
