"""docker-compose.kafka.yml cannot run here; this keeps it in step with the local tooling's settings."""

from __future__ import annotations

import re
from pathlib import Path

from spotreel.devstack.settings import DevstackSettings

COMPOSE = (Path(__file__).resolve().parents[2] / "docker-compose.kafka.yml").read_text()


def test_server_versions_match_the_local_tooling():
    s = DevstackSettings()
    assert f"image: apache/kafka:{s.kafka_version}" in COMPOSE
    assert f"image: cassandra:{s.cassandra_version}" in COMPOSE


def test_published_ports_match_settings_and_bind_loopback_only():
    s = DevstackSettings(cluster_nodes=3)  # the cluster profile's ports too
    published = re.findall(r'"([\d.]+):(\d+):(\d+)"', COMPOSE)
    assert published, "no published ports found"
    assert {host for host, _, _ in published} == {s.cassandra_node_host(n) for n in (1, 2, 3)}
    outside = {int(port) for _, port, _ in published}
    assert outside == {*(s.kafka_node_ports(n)[0] for n in (1, 2, 3)), s.cassandra_port, s.s3_port}
    for n in (1, 2, 3):
        assert f"PLAINTEXT://127.0.0.1:{s.kafka_node_ports(n)[0]}" in COMPOSE
        assert f'"{s.cassandra_node_host(n)}:{s.cassandra_port}:{s.cassandra_port}"' in COMPOSE


def test_the_cluster_profile_is_the_local_tooling_s():
    from spotreel.devstack.cassandra_cluster import initial_token

    cluster = {n: DOC["services"][n] for n in ("kafka-2", "kafka-3", "cassandra-2", "cassandra-3")}
    assert all(svc["profiles"] == ["cluster"] for svc in cluster.values())
    assert "profiles" not in DOC["services"]["kafka"] and "profiles" not in DOC["services"]["cassandra"]
    env = dict(line.split("=", 1) for line in (Path(__file__).resolve().parents[2] / "docker-compose.cluster.env")
               .read_text().splitlines() if line and not line.startswith("#"))
    assert env["COMPOSE_PROFILES"] == "cluster" and env["SPOTREEL_CLUSTER_NODES"] == "3"
    assert env["SPOTREEL_COMPOSE_KAFKA_VOTERS"] == "1@kafka:19093,2@kafka-2:19093,3@kafka-3:19093"
    s = DevstackSettings(cluster_nodes=3)
    assert (env["SPOTREEL_COMPOSE_KAFKA_RF"], env["SPOTREEL_COMPOSE_KAFKA_MIN_ISR"]) == (str(s.kafka_rf),
                                                                                       str(s.kafka_min_isr))
    for n, name in ((1, "cassandra"), (2, "cassandra-2"), (3, "cassandra-3")):
        opts = DOC["services"][name]["environment"]["JVM_EXTRA_OPTS"]
        assert f"-Dcassandra.initial_token={initial_token(n, 3)}" in opts, name


def test_s3_credentials_match_settings():
    s = DevstackSettings()
    assert f'"accessKey": "{s.s3_access_key}"' in COMPOSE
    assert f'"secretKey": "{s.s3_secret_key}"' in COMPOSE
    assert f"-s3.port={s.s3_port}" in COMPOSE


# -- the spotreel services ----------------------------------------------------------------------------------

import shlex  # noqa: E402

import yaml  # noqa: E402

from spotreel.cli import build_parser  # noqa: E402
from spotreel.devstack.services import (projector_metrics_port, scheduler_metrics_port, services,  # noqa: E402
                                     webhooks_metrics_port)

DOC = yaml.safe_load(COMPOSE)
SPOTREEL = ("scheduler", "projector", "gateway", "webhooks", "worker")


def _spotreel_argv(service: str) -> list[str]:
    """The `spotreel …` part of a service's shell command."""
    script = DOC["services"][service]["command"][-1]
    tail = script.rsplit("exec spotreel ", 1)[1]
    return shlex.split(tail)


def test_every_local_stack_service_and_a_worker_are_in_compose():
    local = {s.name for s in services(DevstackSettings())}
    assert local <= set(DOC["services"]), local - set(DOC["services"])
    assert set(SPOTREEL) <= set(DOC["services"])


def test_service_commands_parse_and_use_the_local_stack_metrics_ports():
    s = DevstackSettings()
    parser = build_parser()
    for name in SPOTREEL:
        argv = _spotreel_argv(name)
        parser.parse_args(argv)  # exits (SystemExit) on an unknown subcommand or option
        assert argv[0] == name
    assert "--metrics-port" in _spotreel_argv("scheduler")
    ports = {n: int(a[a.index("--metrics-port") + 1]) for n in ("scheduler", "projector", "webhooks")
             for a in [_spotreel_argv(n)]}
    assert ports == {"scheduler": scheduler_metrics_port(s), "projector": projector_metrics_port(s),
                     "webhooks": webhooks_metrics_port(s)}
    assert f"http://127.0.0.1:{s.gateway_port}" in " ".join(_spotreel_argv("worker"))
    assert f"127.0.0.1:{s.gateway_port}/healthz" in str(DOC["services"]["gateway"]["healthcheck"])


def test_service_settings_are_real_settings_with_the_defaults():
    s = DevstackSettings()
    for name in ("provision", *SPOTREEL):
        svc = DOC["services"][name]
        assert svc["network_mode"] == "host", name  # 127.0.0.1 reaches the published ports
        env = svc["environment"]
        for var, value in env.items():
            field = var.removeprefix("SPOTREEL_").lower()
            assert var.startswith("SPOTREEL_") and hasattr(s, field), var
            if field in ("home",):
                continue  # the container's own path
            if field == "webhook_allow_private":
                assert value == "${SPOTREEL_WEBHOOK_ALLOW_PRIVATE:-0}" and s.webhook_allow_private == 0
                continue
            if field == "cluster_nodes":  # 3 from docker-compose.cluster.env
                assert value == "${SPOTREEL_CLUSTER_NODES:-1}" and s.cluster_nodes == 1
                continue
            assert str(getattr(s, field)) == str(value), var
        assert env["SPOTREEL_HOST"] == "127.0.0.1"


def test_services_wait_for_provisioning():
    for name in ("scheduler", "projector", "gateway", "webhooks"):
        assert DOC["services"][name]["depends_on"] == {"provision": {"condition": "service_completed_successfully"}}
    assert DOC["services"]["worker"]["depends_on"] == {"gateway": {"condition": "service_healthy"}}
