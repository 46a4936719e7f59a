"""The cluster profile of the local stack: how many Kafka brokers and Cassandra nodes a home runs.

`spotreel infra up --nodes 3` starts three KRaft brokers (kafka-1..3, each broker and controller, on
127.0.0.1 at kafka_port + (n-1) * kafka_node_port_step) and three Cassandra nodes (cassandra-1..3 on
127.0.0.1, 127.0.0.2, 127.0.0.3, sharing ports); the default stays one of each ("kafka", "cassandra").
The count is written into the home (data/cluster.json) when its data is first made, so `down`, `status` and a
later `up` without the flag act on the same nodes, and a home never silently changes shape under its data.
"""

from __future__ import annotations

import json
from dataclasses import replace

from spotreel.devstack.cassandra import Cassandra
from spotreel.devstack.cassandra_cluster import CassandraNode
from spotreel.devstack.kafka import Kafka
from spotreel.devstack.kafka_cluster import KafkaNode
from spotreel.devstack.layout import Layout
from spotreel.devstack.server import Server
from spotreel.platform.errors import InfraError
from spotreel.config.settings import Settings

# Loopback addresses 127.0.0.1..n, and a controller quorum that keeps a majority with one node down.
MAX_NODES = 9


def kafka_nodes(settings: Settings) -> list[Server]:
    if settings.cluster_nodes <= 1:
        return [Kafka(settings)]
    return [KafkaNode(settings, n) for n in range(1, settings.cluster_nodes + 1)]


def cassandra_nodes(settings: Settings) -> list[Server]:
    if settings.cluster_nodes <= 1:
        return [Cassandra(settings)]
    return [CassandraNode(settings, n) for n in range(1, settings.cluster_nodes + 1)]


def recorded_nodes(settings: Settings) -> int | None:
    """The node count this home's data was made with; None for a home without data yet."""
    path = Layout.of(settings).data_root / "cluster.json"
    try:
        return int(json.loads(path.read_text())["nodes"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    data = Layout.of(settings).data_root
    if (data / "kafka").is_dir() or (data / "cassandra").is_dir():
        return 1  # a home made before the profile existed
    return None


def record_nodes(settings: Settings) -> None:
    path = Layout.of(settings).data_root / "cluster.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"nodes": settings.cluster_nodes}) + "\n")


def profile(settings: Settings, nodes: int | None, *, fresh: bool = False) -> Settings:
    """The settings with the home's node count: `--nodes` when given (refused when the home's data was made
    with another count, unless `--fresh` wipes it), else what the home recorded, else SPOTREEL_CLUSTER_NODES."""
    if nodes is not None and not 1 <= nodes <= MAX_NODES:
        raise InfraError(f"--nodes must be between 1 and {MAX_NODES}, got {nodes}")
    recorded = recorded_nodes(settings)
    wanted = nodes if nodes is not None else (recorded or settings.cluster_nodes)
    if recorded is not None and wanted != recorded and fresh:
        old = replace(settings, cluster_nodes=recorded)
        if any(c.running() is not None for c in (*kafka_nodes(old), *cassandra_nodes(old))):
            raise InfraError(f"the stack in {settings.home} runs {recorded} node(s) of Kafka and Cassandra",
                             [f"`spotreel infra down` it first, then `spotreel infra up --nodes {wanted} --fresh`"])
    if recorded is not None and wanted != recorded and not fresh:
        raise InfraError(f"the stack in {settings.home} has {recorded} node(s) of Kafka and Cassandra, not {wanted}",
                         [f"`spotreel infra down` it, then `spotreel infra up --nodes {wanted} --fresh` "
                          "(wipes its data), or use another SPOTREEL_HOME"])
    return replace(settings, cluster_nodes=wanted)
