"""The launcher's knobs live apart from the runtime settings: Settings (every process) has no JVM heap,
version, internal port or timeout; DevstackSettings adds them under the same SPOTREEL_<NAME> variables."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from spotreel.devstack.java import common_jvm_options
from spotreel.devstack.services import settings_env
from spotreel.devstack.settings import DevstackSettings, launcher_settings
from spotreel.config.settings import Settings

pytestmark = pytest.mark.unit

LAUNCHER = {f.name for f in fields(DevstackSettings)} - {f.name for f in fields(Settings)}


def test_runtime_settings_carry_no_launcher_knob():
    assert {"java_bin", "maven_bin", "kafka_heap", "cassandra_heap", "kafka_version", "cassandra_version",
            "kafka_controller_port", "cassandra_storage_port", "s3_admin_port", "start_timeout",
            "stop_timeout", "jvm_fast_start", "jvm_extra_opts"} <= LAUNCHER
    assert not any(hasattr(Settings(), name) for name in LAUNCHER)


def test_the_same_variables_set_both():
    env = {"SPOTREEL_KAFKA_HEAP": "256m", "SPOTREEL_PARTITIONS": "3", "SPOTREEL_STOP_TIMEOUT": "5"}
    assert Settings.from_env(env).partitions == 3
    s = DevstackSettings.from_env(env)
    assert (s.kafka_heap, s.partitions, s.stop_timeout) == ("256m", 3, 5)
    with pytest.raises(ValueError, match="SPOTREEL_STOP_TIMEOUT must be an integer"):
        DevstackSettings.from_env({"SPOTREEL_STOP_TIMEOUT": "soon"})


def test_a_plain_settings_gets_the_launcher_knobs_of_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SPOTREEL_CASSANDRA_HEAP", "512m")
    monkeypatch.setenv("SPOTREEL_PARTITIONS", "9")
    runtime = Settings(home=tmp_path, partitions=2)
    full = launcher_settings(runtime)
    assert (full.home, full.partitions, full.cassandra_heap) == (tmp_path, 2, "512m")
    assert launcher_settings(full) is full


def test_the_services_environment_reads_back_to_the_same_settings(tmp_path: Path):
    s = DevstackSettings(home=tmp_path, kafka_heap="300m", partitions=4)
    assert DevstackSettings.from_env(settings_env(s)) == s


def test_broker_ports_agree_between_runtime_and_launcher():
    s = DevstackSettings(cluster_nodes=3)
    assert [s.kafka_node_port(n) for n in (1, 2, 3)] == [s.kafka_node_ports(n)[0] for n in (1, 2, 3)]
    assert s.kafka_bootstrap == ",".join(f"127.0.0.1:{s.kafka_node_ports(n)[0]}" for n in (1, 2, 3))


def test_servers_compile_with_c2_unless_asked_to_start_fast(tmp_path: Path):
    # A stack under load runs its JVMs with C2 (docs/decisions/0009-jvms-compile-with-c2.md);
    # `make test` asks for C1 only with SPOTREEL_JVM_FAST_START=1.
    assert "-XX:TieredStopAtLevel=1" not in common_jvm_options(DevstackSettings(home=tmp_path), tmp_path, tmp_path)
    fast = DevstackSettings.from_env({"SPOTREEL_JVM_FAST_START": "1", "SPOTREEL_HOME": str(tmp_path)})
    assert "-XX:TieredStopAtLevel=1" in common_jvm_options(fast, tmp_path, tmp_path)
