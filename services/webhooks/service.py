"""Settings → a ready Notifier (Cassandra session with migrations applied, Kafka consumer, metrics)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from typing import Iterator

from spotreel.services.webhooks.backoff import RetryPolicy
from spotreel.services.webhooks.metrics import WebhookMetrics
from spotreel.services.webhooks.notifier import Notifier, NotifierConfig
from spotreel.config.settings import Settings

log = logging.getLogger("spotreel.webhooks")


def group_id(settings: Settings) -> str:
    return f"{settings.topic_prefix}.webhooks"


def config_for(settings: Settings, policy: RetryPolicy | None = None,
               env: Mapping[str, str] | None = None) -> NotifierConfig:
    """`env`: where the tuning knobs (SPOTREEL_WEBHOOKS_<NAME>) are read; the process's environment by default."""
    from spotreel.config import knobs
    from spotreel.platform.topics import events_topic
    from spotreel.services.webhooks.notifier import ENV_PREFIX, NOT_FROM_ENV

    return NotifierConfig(bootstrap=settings.kafka_bootstrap, group_id=group_id(settings),
                          events_topic=events_topic(settings), gateway_url=settings.gateway_url,
                          allow_private=bool(settings.webhook_allow_private), policy=policy or RetryPolicy(),
                          **knobs.dataclass_overrides(NotifierConfig, ENV_PREFIX,
                                                      os.environ if env is None else env, NOT_FROM_ENV))


@contextlib.contextmanager
def build(settings: Settings, policy: RetryPolicy | None = None, metrics_port: int = 0,
          session=None) -> Iterator[Notifier]:
    """`session`: an open Cassandra session on the keyspace (tests pass theirs); else one is opened and
    the keyspace migrated."""
    from prometheus_client import start_http_server

    from spotreel.personal.setup import open_cassandra_vault
    from spotreel.services.webhooks.store import WebhookStore

    metrics = WebhookMetrics.create()

    def serve_metrics() -> None:
        # Only once the store is reachable and migrated: `infra up` reads a served /metrics as "wired".
        if metrics_port:
            start_http_server(metrics_port, addr=settings.host, registry=metrics.registry)

    if session is not None:
        serve_metrics()
        yield Notifier(config_for(settings, policy), WebhookStore(session), metrics,
                       vault=open_cassandra_vault(settings, session))
        return
    from spotreel.platform.cql import cluster_for
    from spotreel.platform.migrate import migrate

    cluster = cluster_for(settings)
    try:
        own = cluster.connect()
        migrate(own, settings.cassandra_keyspace, say=log.info, replication=settings.cassandra_rf,
                datacenter=settings.cassandra_datacenter)
        own.set_keyspace(settings.cassandra_keyspace)
        serve_metrics()
        yield Notifier(config_for(settings, policy), WebhookStore(own), metrics,
                       vault=open_cassandra_vault(settings, own))
    finally:
        cluster.shutdown()
