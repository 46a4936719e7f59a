"""Rendered configs and command lines: loopback only, everything under one home, small heaps."""

from __future__ import annotations

import json
import re

import pytest

from spotreel.devstack.cassandra import Cassandra
from spotreel.devstack.kafka import Kafka
from spotreel.devstack.maven import Bundle, cassandra_bundle, fetch, kafka_bundle, render_pom
from spotreel.devstack.seaweed import GRPC_OFFSET, Seaweed
from spotreel.devstack.stack import components
from spotreel.devstack.settings import DevstackSettings
from tests.unit.infra_env import isolated_settings

pytestmark = pytest.mark.unit


@pytest.fixture
def settings(monkeypatch, tmp_path) -> DevstackSettings:
    return isolated_settings(monkeypatch, tmp_path)


def props(text: str) -> dict[str, str]:
    return dict(ln.split("=", 1) for ln in text.splitlines() if ln.strip() and not ln.startswith("#"))


def yaml_scalars(text: str) -> dict[str, str]:
    """Top-level `key: value` lines (enough to check our template without a YAML library)."""
    out = {}
    for ln in text.splitlines():
        m = re.match(r"^([a-z_]+):\s*(\S.*)?$", ln)
        if m:
            out[m.group(1)] = (m.group(2) or "").strip()
    return out


def heap_bytes(opt: str) -> int:
    m = re.fullmatch(r"-Xm[sx](\d+)([kKmMgG])", opt)
    assert m, opt
    return int(m.group(1)) * {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]


def test_kafka_server_properties(settings):
    p = props(Kafka(settings).render_server_properties())
    port, ctrl = settings.kafka_port, settings.kafka_controller_port
    assert p["process.roles"] == "broker,controller"
    assert p["listeners"] == f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{ctrl}"
    assert p["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{port}"
    assert p["controller.quorum.voters"] == f"1@127.0.0.1:{ctrl}"
    assert p["log.dirs"].startswith(str(settings.home / "data" / "kafka"))
    assert p["offsets.topic.replication.factor"] == "1"
    assert p["transaction.state.log.min.isr"] == "1"
    assert p["auto.create.topics.enable"] == "false"


def test_kafka_logs_to_a_file_under_home(settings):
    p = props(Kafka(settings).render_log4j())
    assert p["log4j.appender.file.File"] == str(settings.home / "logs" / "kafka" / "server.log")
    assert "stdout" not in p["log4j.rootLogger"].lower()


def test_cassandra_yaml(settings):
    text = Cassandra(settings).render_yaml()
    y = yaml_scalars(text)
    assert y["listen_address"] == y["rpc_address"] == "127.0.0.1"
    assert y["native_transport_port"] == str(settings.cassandra_port)
    assert y["storage_port"] == str(settings.cassandra_storage_port)
    for key in ("commitlog_directory", "saved_caches_directory", "hints_directory", "cdc_raw_directory"):
        assert y[key].startswith(str(settings.home / "data" / "cassandra")), key
    assert f'seeds: "127.0.0.1:{settings.cassandra_storage_port}"' in text
    assert y["memtable_heap_space"] == "64MiB"
    assert "$" not in text


def test_cassandra_logback_writes_one_file(settings):
    xml = Cassandra(settings).render_logback()
    assert f"<file>{settings.home / 'logs' / 'cassandra' / 'system.log'}</file>" in xml
    assert "ConsoleAppender" not in xml


def test_jvm_command_lines(settings):
    kafka = Kafka(settings).command()
    cassandra = Cassandra(settings).command()
    for cmd in (kafka, cassandra):
        heaps = [heap_bytes(o) for o in cmd if o.startswith(("-Xmx", "-Xms"))]
        assert heaps and max(heaps) <= 1 << 30
        assert any(o.startswith("-XX:ErrorFile=" + str(settings.home / "logs")) for o in cmd)
    assert kafka[-2:] == ["kafka.Kafka", str(settings.home / "run" / "kafka" / "server.properties")]
    assert cassandra[-1] == "org.apache.cassandra.service.CassandraDaemon"
    assert f"-javaagent:{cassandra_bundle(settings).lib(settings) / 'jamm-0.4.0.jar'}" in cassandra
    assert "--add-opens" in cassandra and "java.base/sun.nio.ch=ALL-UNNAMED" in cassandra
    assert f"-Dcassandra.config=file://{settings.home / 'run' / 'cassandra' / 'cassandra.yaml'}" in cassandra


def test_seaweed_binds_loopback_and_every_port_is_ours(settings):
    weed = Seaweed(settings)
    cmd = weed.command()
    assert "-ip=127.0.0.1" in cmd and "-ip.bind=127.0.0.1" in cmd
    for port in weed.http_ports():
        assert any(o.endswith(f"={port}") for o in cmd), port
        assert any(o.endswith(f"={port + GRPC_OFFSET}") for o in cmd), port
    assert "-webdav=false" in cmd and "-s3.port.iceberg=0" in cmd
    config = json.loads(weed.render_s3_config())
    creds = config["identities"][0]["credentials"][0]
    assert creds == {"accessKey": settings.s3_access_key, "secretKey": settings.s3_secret_key}


def test_components_have_distinct_ports_logs_and_pidfiles(settings):
    comps = components(settings)
    assert [c.name for c in comps] == ["kafka", "cassandra", "s3", "scheduler", "projector", "gateway", "webhooks"]
    all_ports = [p for c in comps for p in c.ports()]
    assert len(all_ports) == len(set(all_ports))
    assert len({c.pidfile() for c in comps}) == len(comps)
    for c in comps:
        for path in (c.pidfile(), c.main_log(), c.stdout_log, c.data_dir):
            assert settings.home in path.parents


def test_pom_names_the_pinned_coordinates():
    s = DevstackSettings()
    pom = render_pom(kafka_bundle(s))
    assert f"<artifactId>kafka_2.13</artifactId><version>{s.kafka_version}</version>" in pom
    assert "<artifactId>kafka-tools</artifactId>" in pom
    assert "<repositories>" not in pom  # Maven's own configuration (Central or a mirror) decides
    mirrored = render_pom(cassandra_bundle(s), "http://example.invalid/m2")
    assert "<id>central</id><url>http://example.invalid/m2</url>" in mirrored
    assert "<pluginRepositories>" in mirrored


def test_versions_are_pinned_patch_releases():
    s = DevstackSettings()
    assert re.fullmatch(r"3\.9\.\d+", s.kafka_version)
    assert re.fullmatch(r"5\.0\.\d+", s.cassandra_version)


def test_fetch_is_a_no_op_when_the_marker_matches(settings):
    # No Maven at all: a second fetch must not even look for it.
    no_mvn = DevstackSettings(**{**settings.__dict__, "maven_bin": "/nonexistent/mvn"})
    said: list[str] = []
    jars = fetch(no_mvn, said.append)
    assert set(jars) == {"kafka", "cassandra"}
    assert all("already in" in line for line in said)


def test_marker_for_other_coordinates_is_not_trusted(settings):
    bundle = kafka_bundle(settings)
    other = Bundle(bundle.name, bundle.version, (*bundle.coordinates, "org.example:extra:1"))
    assert bundle.cached_jars(settings) is not None
    assert other.cached_jars(settings) is None
    (bundle.lib(settings) / "jamm-0.4.0.jar").unlink()
    assert bundle.cached_jars(settings) is None
