"""The S3 client as the services and the worker open it (path-style addressing, one try, short timeouts):
runtime code, apart from the launcher of the local SeaweedFS (devstack/seaweed.py), so a process that talks to
S3 imports nothing that starts a store (the import-linter contract "Runtime code never imports the local
launcher" in tools/import-walls.toml)."""

from __future__ import annotations

from spotreel.settings import Settings


def s3_client(settings: Settings, timeout: float = 5.0):
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3", endpoint_url=settings.s3_endpoint, region_name=settings.s3_region,
        aws_access_key_id=settings.s3_access_key, aws_secret_access_key=settings.s3_secret_key,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                      connect_timeout=min(timeout, 2.0), read_timeout=timeout),
    )
