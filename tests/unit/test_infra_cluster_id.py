"""Kafka's cluster id: Kafka's own Uuid format, made once and kept across restarts."""

from __future__ import annotations

import base64

import pytest

from spotreel.devstack.kafka import CLUSTER_ID, Kafka, new_cluster_id
from spotreel.config.settings import Settings

pytestmark = pytest.mark.unit


def test_format_matches_kafka_uuid():
    ids = {new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    for cid in ids:
        assert len(cid) == 22 and not cid.startswith("-") and "=" not in cid
        assert CLUSTER_ID.match(cid)
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_cluster_id_is_persisted(tmp_path):
    kafka = Kafka(Settings(home=tmp_path))
    first = kafka.cluster_id()
    assert (tmp_path / "data" / "kafka" / "cluster.id").read_text().strip() == first
    assert Kafka(Settings(home=tmp_path)).cluster_id() == first


def test_formatted_storage_wins_over_the_id_file(tmp_path):
    kafka = Kafka(Settings(home=tmp_path))
    kafka.cluster_id()
    kafka.kraft_dir.mkdir(parents=True)
    (kafka.kraft_dir / "meta.properties").write_text("version=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\nnode.id=1\n")
    assert kafka.cluster_id() == "AAAAAAAAAAAAAAAAAAAAAA"


def test_every_node_of_the_cluster_profile_takes_the_id_the_first_one_made(tmp_path):
    from spotreel.devstack.kafka_cluster import KafkaNode

    settings = Settings(home=tmp_path)
    first = KafkaNode(settings, 1)
    cid = first.cluster_id()
    assert CLUSTER_ID.match(cid)
    assert [KafkaNode(settings, n).cluster_id() for n in (2, 3)] == [cid, cid]
    assert (first.layout.data_root / "kafka-cluster.id").read_text().strip() == cid
    assert not list(first.layout.data_root.glob("*.tmp"))
    assert not (first.data_dir / "cluster.id").exists()  # the single node's file is not the cluster's
