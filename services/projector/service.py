"""The projector's factory: settings in, a ready `Projector` out (Cassandra session, codec, Kafka)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from typing import Iterator

from spotreel.platform.topics import events_deadletter_topic
from spotreel.config.settings import Settings

log = logging.getLogger("spotreel.projector")


def group_id(settings: Settings) -> str:
    return f"{settings.topic_prefix}.projector"


def ensure_deadletter_topic(settings: Settings, timeout: float = 30.0) -> None:
    from spotreel.platform.topics import admin_client, create_missing, events_deadletter_spec

    create_missing(admin_client(settings.kafka_bootstrap, timeout), [events_deadletter_spec(settings)], timeout)


def metrics_registry():
    """The projector's registry and its one gauge (also read by the monitoring lint test)."""
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry()
    gauge = Gauge("spotreel_projection_lag", "events on the topic not yet projected into Cassandra",
                  registry=registry)
    return registry, gauge


def _metrics(port: int):
    from prometheus_client import start_http_server

    registry, gauge = metrics_registry()
    start_http_server(port, addr="127.0.0.1", registry=registry)
    return gauge.set


@contextlib.contextmanager
def build(settings: Settings, *, rebuild: bool = False, until_idle: bool = False, truncate: bool = False,
          metrics_port: int = 0, batch_size: int = 2000,
          env: Mapping[str, str] | None = None) -> Iterator["Projector"]:  # noqa: F821
    """`env`: where the tuning knobs (SPOTREEL_PROJECTOR_<NAME>) are read; the process's environment by default."""
    from spotreel.config import knobs
    from spotreel.codec import Codec
    from spotreel.platform.cql import cluster_for
    from spotreel.platform.migrate import migrate
    from spotreel.platform.topics import events_topic
    from spotreel.services.projector.consumer import ENV_PREFIX, NOT_FROM_ENV, Projector, ProjectorConfig
    from spotreel.services.projector.store import Store

    cluster = cluster_for(settings)
    try:
        session = cluster.connect()
        migrate(session, settings.cassandra_keyspace, say=log.info, replication=settings.cassandra_rf,
                datacenter=settings.cassandra_datacenter)
        store = Store(session)
        if truncate:
            store.truncate()
        config = ProjectorConfig(
            bootstrap=settings.kafka_bootstrap, group_id=group_id(settings), events_topic=events_topic(settings),
            events_deadletter_topic=events_deadletter_topic(settings), rebuild=rebuild, until_idle=until_idle,
            batch_size=batch_size,
            **knobs.dataclass_overrides(ProjectorConfig, ENV_PREFIX, os.environ if env is None else env,
                                        NOT_FROM_ENV),
        )
        on_lag = _metrics(metrics_port) if metrics_port else None
        yield Projector(config, store, Codec.default(), on_lag=on_lag)
    finally:
        cluster.shutdown()
