"""The S3 client as the services and the worker open it: path-style addressing, botocore's retry mode with
the settings' budget of tries, and timeouts short enough that a store that stopped answering is noticed in
seconds. Runtime code, apart from the launcher of the local SeaweedFS (devstack/seaweed.py), so a process
that talks to S3 imports nothing that starts a store (the import-linter contract "Runtime code never imports
the local launcher" in tools/import-walls.toml)."""

from __future__ import annotations

from typing import Any

from spotreel.config.settings import S3_RETRY_MODES, Settings


def client_config(settings: Settings, read_timeout_s: float | None = None, attempts: int | None = None) -> Any:
    """botocore's Config for the settings. `read_timeout_s` / `attempts` override the settings' (the
    launcher's probe asks once, with its own timeout)."""
    from botocore.config import Config

    if settings.s3_retry_mode not in S3_RETRY_MODES:
        raise ValueError(f"s3_retry_mode must be one of {', '.join(S3_RETRY_MODES)}, got {settings.s3_retry_mode!r}")
    tries = attempts if attempts is not None else settings.s3_max_attempts
    if tries < 1 or settings.s3_connect_timeout_ms <= 0 or settings.s3_read_timeout_ms <= 0:
        raise ValueError("S3 tries must be >= 1 and its timeouts > 0")
    read_s = read_timeout_s if read_timeout_s is not None else settings.s3_read_timeout_ms / 1000
    return Config(s3={"addressing_style": "path"}, signature_version="s3v4",
                  retries={"mode": settings.s3_retry_mode, "total_max_attempts": tries},
                  connect_timeout=min(read_s, settings.s3_connect_timeout_ms / 1000), read_timeout=read_s)


def s3_client(settings: Settings, timeout: float | None = None, attempts: int | None = None):
    """`timeout`: the read timeout in seconds in place of SPOTREEL_S3_READ_TIMEOUT_MS (and a bound on the
    connect timeout); `attempts`: tries per call in place of SPOTREEL_S3_MAX_ATTEMPTS."""
    import boto3

    return boto3.client(
        "s3", endpoint_url=settings.s3_endpoint, region_name=settings.s3_region,
        aws_access_key_id=settings.s3_access_key, aws_secret_access_key=settings.s3_secret_key,
        config=client_config(settings, timeout, attempts),
    )
