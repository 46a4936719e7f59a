"""The Cassandra driver's cluster and session as the services open them: runtime code, apart from the launcher
of the local Cassandra (devstack/cassandra.py), so a service that talks to Cassandra imports nothing that starts
one (the import-linter contract "Runtime code never imports the local launcher" in tools/import-walls.toml)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from spotreel.config.settings import Settings


# Seconds between the driver's attempts to reach a host it marked down. Its default schedule grows to ten
# minutes (1, 2, 4, … 600 s, jittered), so a service whose Cassandra was down for a minute would go on failing
# for up to another minute after it is back; the whole-system chaos test restarts Cassandra and holds this.
RECONNECT_BASE_S = 0.5
RECONNECT_MAX_S = 4.0


def reconnection_policy():
    from cassandra.policies import ExponentialReconnectionPolicy

    return ExponentialReconnectionPolicy(RECONNECT_BASE_S, RECONNECT_MAX_S, max_attempts=None)


def consistency(name: str, setting: str) -> int:
    """The driver's ConsistencyLevel for a setting's name (LOCAL_QUORUM, SERIAL, ...); a typo stops the start."""
    from cassandra import ConsistencyLevel

    value = ConsistencyLevel.name_to_value.get(name.strip().upper())
    if value is None:
        raise ValueError(f"SPOTREEL_{setting.upper()}: unknown consistency level {name!r} "
                         f"(one of {', '.join(sorted(ConsistencyLevel.name_to_value))})")
    return value


# Row classes by column names: the driver's default row factory builds a new namedtuple class for every result
# (a visible share of a loaded gateway's CPU in a profile); the same query returns the same columns.
ROW_CLASSES_MAX = 1024
_row_classes: dict[tuple[str, ...], type] = {}


def named_rows(colnames, rows) -> list:
    """The driver's `named_tuple_factory` (the same cleaned field names, the same fallback for names a
    namedtuple refuses), with each set of columns' class made once."""
    key = tuple(colnames)
    row = _row_classes.get(key)
    if row is None:
        from cassandra.query import named_tuple_factory

        if len(_row_classes) >= ROW_CLASSES_MAX:
            _row_classes.clear()  # bounded: ad-hoc queries with ever new column lists must not grow memory
        row = _row_classes[key] = type(named_tuple_factory(key, [tuple(range(len(key)))])[0])
    return [row(*r) for r in rows]


def execution_profile(settings: Settings, request_timeout: float = 10.0):
    """Every statement's consistency, one place: reads and writes at `cassandra_consistency` (LOCAL_QUORUM: with
    RF 3 a write acknowledged is on two replicas, and a read sees it with one node down), the Paxos round of
    the LWT claims at `cassandra_serial_consistency` (LOCAL_SERIAL). Requests go to a replica of the row in
    the local datacenter first (token-aware, datacenter-aware). Rows are the driver's named tuples
    (`named_rows`)."""
    from cassandra.cluster import ExecutionProfile
    from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy

    return ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=settings.cassandra_datacenter)),
        consistency_level=consistency(settings.cassandra_consistency, "cassandra_consistency"),
        serial_consistency_level=consistency(settings.cassandra_serial_consistency, "cassandra_serial_consistency"),
        request_timeout=request_timeout, row_factory=named_rows)


def cluster_for(settings: Settings, request_timeout: float = 10.0, **options: object):
    """The driver's Cluster for a long-running service: the contact points of the settings (every node of the
    local stack, or a managed cluster's), the consistency of `execution_profile`, reconnecting within seconds."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster

    options.setdefault("execution_profiles", {EXEC_PROFILE_DEFAULT: execution_profile(settings, request_timeout)})
    return Cluster(settings.cassandra_hosts, port=settings.cassandra_port, protocol_version=5,
                   reconnection_policy=reconnection_policy(), **options)


@contextmanager
def cql_session(settings: Settings, timeout: float = 10.0, keyspace: str | None = None) -> Iterator[object]:
    cluster = cluster_for(settings, request_timeout=max(timeout, 10.0),
                          connect_timeout=timeout, control_connection_timeout=timeout)
    try:
        session = cluster.connect(keyspace)
        yield session
    finally:
        cluster.shutdown()
