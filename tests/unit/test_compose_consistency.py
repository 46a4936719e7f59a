"""docker-compose.kafka.yml cannot run here; this keeps it in step with the local tooling's settings."""

from __future__ import annotations

import re
from pathlib import Path

from spotreel.settings import Settings

COMPOSE = (Path(__file__).resolve().parents[2] / "docker-compose.kafka.yml").read_text()


def test_server_versions_match_the_local_tooling():
    s = Settings()
    assert f"image: apache/kafka:{s.kafka_version}" in COMPOSE
    assert f"image: cassandra:{s.cassandra_version}" in COMPOSE


def test_published_ports_match_settings_and_bind_loopback_only():
    s = Settings()
    published = re.findall(r'"([\d.]+):(\d+):(\d+)"', COMPOSE)
    assert published, "no published ports found"
    assert all(host == "127.0.0.1" for host, _, _ in published)
    outside = {int(port) for _, port, _ in published}
    assert outside == {s.kafka_port, s.cassandra_port, s.s3_port}
    assert f"PLAINTEXT://127.0.0.1:{s.kafka_port}" in COMPOSE


def test_s3_credentials_match_settings():
    s = Settings()
    assert f'"accessKey": "{s.s3_access_key}"' in COMPOSE
    assert f'"secretKey": "{s.s3_secret_key}"' in COMPOSE
    assert f"-s3.port={s.s3_port}" in COMPOSE
