"""The Cassandra driver's cluster and session as the services open them: runtime code, apart from the launcher
of the local Cassandra (devstack/cassandra.py), so a service that talks to Cassandra imports nothing that starts
one (the import-linter contract "Runtime code never imports the local launcher" in tools/import-walls.toml)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from spotreel.settings import Settings


# Seconds between the driver's attempts to reach a host it marked down. Its default schedule grows to ten
# minutes (1, 2, 4, … 600 s, jittered), so a service whose Cassandra was down for a minute went on failing
# for up to another minute after it was back (measured: gateway 35 s, projector 55 s after an 80 s restart).
RECONNECT_BASE_S = 0.5
RECONNECT_MAX_S = 4.0


def reconnection_policy():
    from cassandra.policies import ExponentialReconnectionPolicy

    return ExponentialReconnectionPolicy(RECONNECT_BASE_S, RECONNECT_MAX_S, max_attempts=None)


def cluster_for(settings: Settings, **options: object):
    """The driver's Cluster for a long-running service: our one node, reconnecting within seconds."""
    from cassandra.cluster import Cluster

    return Cluster([settings.host], port=settings.cassandra_port, protocol_version=5,
                   reconnection_policy=reconnection_policy(), **options)


@contextmanager
def cql_session(settings: Settings, timeout: float = 10.0, keyspace: str | None = None) -> Iterator[object]:
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy

    profile = ExecutionProfile(load_balancing_policy=WhiteListRoundRobinPolicy([settings.host]),
                               request_timeout=max(timeout, 10.0))
    cluster = cluster_for(settings, execution_profiles={EXEC_PROFILE_DEFAULT: profile},
                          connect_timeout=timeout, control_connection_timeout=timeout)
    try:
        session = cluster.connect(keyspace)
        yield session
    finally:
        cluster.shutdown()
