"""Real dependencies from settings: Kafka producer, Cassandra session, S3 presigner, wall clock."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

from spotreel.api.config import GatewayConfig
from spotreel.dispatch.aio import AsyncDispatch
from spotreel.dispatch.sender import AsyncCommandSender
from spotreel.services.gateway.cassandra_store import CassandraAuth, CassandraReads
from spotreel.services.gateway.deps import Deps
from spotreel.services.gateway.image_store import image_store
from spotreel.services.gateway.public.poolview import KafkaPoolStats
from spotreel.services.gateway.public.usage import KafkaTenantUsage
from spotreel.personal.setup import open_cassandra_vault
from spotreel.config.settings import Settings


def object_eraser(settings: Settings):
    from spotreel.personal.objects import delete_job_objects
    from spotreel.platform.s3 import s3_client

    s3 = s3_client(settings)
    return lambda job_id: delete_job_objects(s3, settings, job_id)


def presigner(settings: Settings, expires_s: int):
    from spotreel.platform.s3 import s3_client

    s3 = s3_client(settings)

    def presign(key: str) -> str:
        # Signing is local: no request reaches the store until the client follows the redirect.
        return s3.generate_presigned_url("get_object", Params={"Bucket": settings.s3_bucket_artifacts, "Key": key},
                                         ExpiresIn=expires_s)
    return presign


@contextmanager
def real_deps(settings: Settings, session=None, presign_seconds: int = 900,
              renewal_batch_ms: float = GatewayConfig.renewal_batch_ms) -> Iterator[Deps]:
    """`session`: an open Cassandra session bound to the keyspace (tests pass theirs); else one is opened.
    `renewal_batch_ms`: the worker API's renewal window (GatewayConfig)."""
    from spotreel.platform.cql import cql_session

    sink = AsyncCommandSender(settings, renewal_window_ms=renewal_batch_ms)
    work = AsyncDispatch(settings, name="gateway")
    pools = KafkaPoolStats(settings)
    usage = KafkaTenantUsage(settings)
    try:
        if session is not None:
            yield Deps(sink, CassandraReads(session), CassandraAuth(session), lambda: int(time.time() * 1000),
                       presign=presigner(settings, presign_seconds), work=work, pools=pools, usage=usage,
                       vault=open_cassandra_vault(settings, session), erase_objects=object_eraser(settings),
                       images=image_store(settings))
            return
        with cql_session(settings, keyspace=settings.cassandra_keyspace) as own:
            yield Deps(sink, CassandraReads(own), CassandraAuth(own), lambda: int(time.time() * 1000),
                       presign=presigner(settings, presign_seconds), work=work, pools=pools, usage=usage,
                       vault=open_cassandra_vault(settings, own), erase_objects=object_eraser(settings),
                       images=image_store(settings))
    finally:
        usage.close()
        pools.close()
        work.close()
        sink.close()
