"""Where the tests find Kafka, Cassandra and S3.

With a reachable Docker engine the servers come from testcontainers; otherwise from the project's own
local tooling (`spotreel infra up`), which is a no-op when the stack already runs. Either way a test gets
the same `Endpoints` and never knows which it was.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from spotreel.config.settings import Settings


@dataclass(frozen=True)
class Endpoints:
    kafka_bootstrap: str
    cassandra_host: str
    cassandra_port: int
    s3_endpoint: str
    s3_access_key: str
    s3_secret_key: str
    s3_region: str
    origin: str  # "local" or "testcontainers"


class StackUnavailable(RuntimeError):
    """The servers could not be provided; tests that need them fail (never skip)."""


def docker_reachable() -> bool:
    if os.environ.get("SPOTREEL_TESTS_NO_DOCKER"):
        return False
    try:
        import docker  # testcontainers depends on it

        client = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:
        return False


def local_stack(settings: Settings) -> Endpoints:
    cmd = [sys.executable, "-m", "spotreel.cli", "infra", "up"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise StackUnavailable(
            f"`spotreel infra up` failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return Endpoints(
        kafka_bootstrap=settings.kafka_bootstrap,
        cassandra_host=settings.host,
        cassandra_port=settings.cassandra_port,
        s3_endpoint=settings.s3_endpoint,
        s3_access_key=settings.s3_access_key,
        s3_secret_key=settings.s3_secret_key,
        s3_region=settings.s3_region,
        origin="local",
    )


@contextlib.contextmanager
def container_stack(settings: Settings) -> Iterator[Endpoints]:
    from testcontainers.community.cassandra import CassandraContainer
    from testcontainers.community.kafka import KafkaContainer
    from testcontainers.community.minio import MinioContainer

    kafka = KafkaContainer("apache/kafka:3.9.2").with_kraft()
    cassandra = CassandraContainer("cassandra:5.0.9")
    minio = MinioContainer(access_key=settings.s3_access_key, secret_key=settings.s3_secret_key)
    with kafka, cassandra, minio:
        host, port = cassandra.get_contact_points()[0]
        cfg = minio.get_config()
        yield Endpoints(
            kafka_bootstrap=kafka.get_bootstrap_server(),
            cassandra_host=host,
            cassandra_port=int(port),
            s3_endpoint=f"http://{cfg['endpoint']}",
            s3_access_key=settings.s3_access_key,
            s3_secret_key=settings.s3_secret_key,
            s3_region=settings.s3_region,
            origin="testcontainers",
        )


def project_root() -> Path:
    return Path(__file__).resolve().parents[2]
