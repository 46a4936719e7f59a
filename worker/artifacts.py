"""Finished videos in the artifacts bucket, under keys that name the job and the lease epoch.

The epoch in the key (`spotreel.domain.ids.artifact_key`) is what keeps a stale worker from ever touching
the referenced video (DESIGN §2.3): two leases never share a key, and the upload is conditional
(If-None-Match: *), so not even a replay of the same lease overwrites an object. Only the key named by the
accepted JobSucceeded counts; a worker whose completion is refused deletes its own upload again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from botocore.exceptions import ClientError

from spotreel.domain.ids import artifact_key

FRAMES_META = "frames-sha256"
CONTENT_META = "content-sha256"


@dataclass(frozen=True)
class Uploaded:
    key: str
    checksum: str  # sha256 of the MP4 bytes
    size_bytes: int
    frames_checksum: str


class ArtifactStore:
    def __init__(self, s3_client, bucket: str) -> None:
        if not bucket:
            raise ValueError("artifacts bucket name is empty")
        self._s3 = s3_client
        self.bucket = bucket

    def upload(self, job_id: str, epoch: int, mp4: bytes, frames_checksum: str) -> Uploaded:
        key = artifact_key(job_id, epoch)
        checksum = hashlib.sha256(mp4).hexdigest()
        try:
            self._s3.put_object(Bucket=self.bucket, Key=key, Body=mp4, ContentType="video/mp4", IfNoneMatch="*",
                                Metadata={FRAMES_META: frames_checksum, CONTENT_META: checksum,
                                          "job-id": job_id, "epoch": str(epoch)})
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("PreconditionFailed", "412"):
                raise
            # This lease uploaded before (a retried completion): reuse it if it is the same video.
            head = self._s3.head_object(Bucket=self.bucket, Key=key)
            if head.get("Metadata", {}).get(CONTENT_META) != checksum:
                raise RuntimeError(f"{key} already holds another video; refusing to overwrite it") from exc
        return Uploaded(key, checksum, len(mp4), frames_checksum)

    def delete(self, key: str) -> None:
        self._s3.delete_object(Bucket=self.bucket, Key=key)
