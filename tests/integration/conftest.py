"""Clients for the real servers, with per-test topics, keyspaces and buckets that are cleaned up."""

from __future__ import annotations

from typing import Callable, Iterator

import boto3
import pytest
from botocore.config import Config
import time

from cassandra.cluster import Cluster, NoHostAvailable, Session
from cassandra.policies import ConstantReconnectionPolicy
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness.stack import Endpoints


@pytest.fixture(scope="session")
def kafka_admin(stack: Endpoints) -> AdminClient:
    return AdminClient({"bootstrap.servers": stack.kafka_bootstrap})


@pytest.fixture
def make_topic(kafka_admin: AdminClient, unique: str) -> Iterator[Callable[..., str]]:
    created: list[str] = []

    def make(suffix: str = "t", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = f"test.{unique}.{suffix}"
        futures = kafka_admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})]
        )
        futures[name].result(timeout=30)
        created.append(name)
        return name

    yield make
    if created:
        for fut in kafka_admin.delete_topics(created).values():
            try:
                fut.result(timeout=30)
            except Exception:
                pass  # cleanup is best effort; names are unique anyway


@pytest.fixture(scope="session")
def cassandra_cluster(stack: Endpoints) -> Iterator[Cluster]:
    # A long suite on a busy 2-core machine can see Cassandra pause long enough for the driver to mark
    # its only host down; reconnect every second instead of backing off towards minutes.
    cluster = Cluster(
        [stack.cassandra_host],
        port=stack.cassandra_port,
        protocol_version=5,
        reconnection_policy=ConstantReconnectionPolicy(1.0, max_attempts=None),
    )
    yield cluster
    cluster.shutdown()


@pytest.fixture
def cql(cassandra_cluster: Cluster, unique: str) -> Iterator[Session]:
    """A session bound to a fresh keyspace that is dropped after the test."""
    session = cassandra_cluster.connect()
    deadline = time.monotonic() + 90
    while True:
        try:
            session.execute(
                f"CREATE KEYSPACE IF NOT EXISTS {unique} "
                "WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
                timeout=30,
            )
            break
        except NoHostAvailable:
            # the host is marked down until the driver's next reconnection; a real outage still fails
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    session.set_keyspace(unique)
    yield session
    session.execute(f"DROP KEYSPACE IF EXISTS {unique}")
    session.shutdown()


@pytest.fixture(scope="session")
def s3(stack: Endpoints):
    return boto3.client(
        "s3",
        endpoint_url=stack.s3_endpoint,
        aws_access_key_id=stack.s3_access_key,
        aws_secret_access_key=stack.s3_secret_key,
        region_name=stack.s3_region,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}),
    )


@pytest.fixture
def bucket(s3, unique: str) -> Iterator[str]:
    s3.create_bucket(Bucket=unique)
    yield unique
    listed = s3.list_objects_v2(Bucket=unique).get("Contents", [])
    for obj in listed:
        s3.delete_object(Bucket=unique, Key=obj["Key"])
    s3.delete_bucket(Bucket=unique)
