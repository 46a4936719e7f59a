"""Input images in the object store, once per content: the artifacts bucket's `inputs/sha256/<hex>`
(domain/images.py). A create request with an image stores it before its job is submitted; an image already
there (the same bytes sent before, by anyone) is not written again, so two jobs of one image share one object.
The worker reads it by the key its job's RenderSpec names and checks its bytes against the hash."""

from __future__ import annotations

import asyncio
from typing import Any

from spotreel.domain.images import ImageRef


class S3ImageStore:
    def __init__(self, s3: Any, bucket: str) -> None:
        self.s3, self.bucket = s3, bucket

    async def put(self, ref: ImageRef, data: bytes) -> bool:
        """Store the image unless its key is there already; True when this call wrote it."""
        return await asyncio.to_thread(self._put, ref, data)

    def _put(self, ref: ImageRef, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.s3.head_object(Bucket=self.bucket, Key=ref.key)
            return False
        except ClientError as exc:
            status = (exc.response.get("ResponseMetadata", {}) or {}).get("HTTPStatusCode")
            if status != 404 and (exc.response.get("Error", {}) or {}).get("Code") not in ("404", "NoSuchKey", "NotFound"):
                raise
        # Two requests racing here write the same bytes under the same key: either write is the object.
        self.s3.put_object(Bucket=self.bucket, Key=ref.key, Body=data, ContentType=ref.media_type,
                           Metadata={"sha256": ref.sha256})
        return True


def image_store(settings: Any) -> S3ImageStore:
    from spotreel.platform.s3 import s3_client

    return S3ImageStore(s3_client(settings), settings.s3_bucket_artifacts)
