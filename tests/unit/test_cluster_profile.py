"""The cluster profile (`infra up --nodes 3`): each node's config, the clients' view of it, the home's shape."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spotreel.devstack.cassandra_cluster import CassandraNode, initial_token
from spotreel.devstack.cluster import profile, record_nodes
from spotreel.devstack.kafka_cluster import KafkaNode
from spotreel.devstack.stack import components
from spotreel.platform.errors import InfraError
from spotreel.platform.migrate import keyspace_cql
from spotreel.platform.topics import topic_specs
from spotreel.devstack.settings import DevstackSettings
from tests.unit.infra_env import isolated_settings
from tests.unit.test_infra_config import props, yaml_scalars

pytestmark = pytest.mark.unit


@pytest.fixture
def settings(monkeypatch, tmp_path) -> DevstackSettings:
    return replace(isolated_settings(monkeypatch, tmp_path), cluster_nodes=3)


def test_three_of_each_with_their_own_ports_and_addresses(settings):
    names = [c.name for c in components(settings) if not c.service]
    assert names == ["kafka-1", "kafka-2", "kafka-3", "cassandra-1", "cassandra-2", "cassandra-3", "s3"]
    kafka = [c for c in components(settings) if isinstance(c, KafkaNode)]
    ports = [p for c in kafka for p in c.ports()]
    assert len(set(ports)) == 6 and settings.kafka_port in ports
    cass = [c for c in components(settings) if isinstance(c, CassandraNode)]
    assert [c.bind_host() for c in cass] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert {tuple(c.ports()) for c in cass} == {(settings.cassandra_port, settings.cassandra_storage_port)}


def test_a_broker_votes_with_every_controller_and_replicates_three_times(settings):
    p = props(KafkaNode(settings, 2).render_server_properties())
    port, ctrl = settings.kafka_node_ports(2)
    assert p["node.id"] == "2"
    assert p["listeners"] == f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{ctrl}"
    assert p["controller.quorum.voters"] == ",".join(
        f"{n}@127.0.0.1:{settings.kafka_node_ports(n)[1]}" for n in (1, 2, 3))
    assert p["offsets.topic.replication.factor"] == p["default.replication.factor"] == "3"
    assert p["min.insync.replicas"] == p["transaction.state.log.min.isr"] == "2"
    assert p["log.dirs"].startswith(str(settings.home / "data" / "kafka-2"))


def test_a_cassandra_node_has_its_address_its_token_and_every_seed(settings):
    node = CassandraNode(settings, 3)
    text = node.render_yaml()
    y = yaml_scalars(text)
    assert y["listen_address"] == y["rpc_address"] == "127.0.0.3"
    assert y["initial_token"] == str(initial_token(3, 3))
    assert y["endpoint_snitch"] == "GossipingPropertyFileSnitch" and y["hinted_handoff_enabled"] == "true"
    assert y["auto_bootstrap"] == "false"
    assert f"127.0.0.2:{settings.cassandra_storage_port}" in text and "$" not in text
    assert any(a.startswith("-Dcassandra-rackdc.properties=file://") for a in node.command())
    tokens = [initial_token(n, 3) for n in (1, 2, 3)]
    assert tokens[0] == -(2**63) and tokens == sorted(tokens) and tokens[2] < 2**63


def test_clients_see_every_node_and_replicate_as_the_profile_says(settings):
    assert settings.kafka_bootstrap.count(",") == 2
    assert settings.cassandra_hosts == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert {(s.replication, s.config["min.insync.replicas"]) for s in topic_specs(settings)} == {(3, "2")}
    single = replace(settings, cluster_nodes=1)
    assert {(s.replication, s.config["min.insync.replicas"]) for s in topic_specs(single)} == {(1, "1")}
    assert single.kafka_bootstrap == f"127.0.0.1:{settings.kafka_port}"
    managed = replace(settings, kafka_bootstrap_servers="k1:9092,k2:9092", cassandra_contact_points="c1, c2",
                      kafka_replication_factor=5, kafka_min_insync_replicas=3)
    assert managed.kafka_bootstrap == "k1:9092,k2:9092" and managed.cassandra_hosts == ["c1", "c2"]
    assert (managed.kafka_rf, managed.kafka_min_isr) == (5, 3)
    assert "'NetworkTopologyStrategy', 'dc-east': 3" in keyspace_cql("spotreel", 3, "dc-east")


def test_a_home_keeps_its_shape(settings):
    assert profile(replace(settings, cluster_nodes=1), 3).cluster_nodes == 3
    record_nodes(settings)
    assert profile(replace(settings, cluster_nodes=1), None).cluster_nodes == 3  # down/status follow the home
    with pytest.raises(InfraError, match="has 3 node"):
        profile(settings, 1)
    assert profile(settings, 1, fresh=True).cluster_nodes == 1  # nothing of the 3 runs: --fresh may reshape
