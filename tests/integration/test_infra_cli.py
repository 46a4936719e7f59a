"""`spotreel infra` against the real local stack (default settings, the stack others test against).

Tests that stop the stack bring it back before they finish, whatever happens.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spotreel.platform import ports as portlib
from spotreel.devstack.stack import components
from spotreel.devstack.settings import DevstackSettings

pytestmark = [pytest.mark.integration, pytest.mark.serial, pytest.mark.timeout(900)]

NAMES = ["kafka", "cassandra", "s3", "scheduler", "projector", "gateway", "webhooks"]


def infra(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spotreel.cli", "infra", *args],
                          capture_output=True, text=True, timeout=timeout)


def status() -> tuple[int, dict]:
    proc = infra("status", "--json", timeout=60)
    return proc.returncode, json.loads(proc.stdout)


def pids(report: dict) -> dict[str, int]:
    return {c["name"]: c["pid"] for c in report["components"]}


def ensure_up() -> dict:
    proc = infra("up")
    assert proc.returncode == 0, f"up failed:\n{proc.stdout}\n{proc.stderr}"
    code, report = status()
    assert code == 0, report
    return report


def processes_under(home: Path) -> list[tuple[int, str]]:
    """Live processes whose command line mentions our home: what `down` must leave none of."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(home) in cmd and state != "Z":
            found.append((int(entry.name), cmd[:160]))
    return found


@pytest.fixture(scope="module")
def settings() -> DevstackSettings:
    return DevstackSettings.from_env()


def test_status_json_shape_and_exit_code(settings):
    ensure_up()
    proc = infra("status", "--json", timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["healthy"] is True
    assert report["home"] == str(settings.home)
    assert report["gateway_url"] == settings.gateway_url
    assert report["dev_api_key"] == settings.dev_api_key
    assert report["kafka_bootstrap"] == settings.kafka_bootstrap
    assert report["s3_endpoint"] == settings.s3_endpoint
    assert [c["name"] for c in report["components"]] == NAMES
    for c in report["components"]:
        assert set(c) >= {"name", "healthy", "state", "address", "pid", "log", "detail"}
        assert c["healthy"] is True and c["state"] == "running"
        assert isinstance(c["pid"], int) and Path(f"/proc/{c['pid']}").exists()
        assert Path(c["log"]).is_file() and settings.home in Path(c["log"]).parents
    by_name = {c["name"]: c for c in report["components"]}
    assert by_name["kafka"]["address"] == settings.kafka_bootstrap
    assert by_name["cassandra"]["detail"].startswith(f"Cassandra {settings.cassandra_version}")
    assert by_name["s3"]["address"] == settings.s3_endpoint

    text = infra("status", timeout=60)
    assert text.returncode == 0
    assert "healthy" in text.stdout.splitlines()[0] and settings.dev_api_key in text.stdout


def test_up_twice_is_a_no_op(settings):
    before = pids(ensure_up())
    t0 = time.monotonic()
    proc = infra("up")
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    for name in NAMES:
        assert f"{name}: already running" in proc.stdout
    assert "nothing to start" in proc.stdout
    assert "created" not in proc.stdout and "applied 0" not in proc.stdout
    assert elapsed < 20, f"a no-op up took {elapsed:.1f} s"
    _, report = status()
    assert pids(report) == before


def test_every_server_listens_on_loopback_only(settings):
    ensure_up()
    listeners = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A":
                addr, port = local.rsplit(":", 1)
                listeners.append((addr, int(port, 16)))
    ours = {p for c in components(settings) for p in c.ports()}
    bound = {port: addr for addr, port in listeners if port in ours}
    assert set(bound) == ours, f"not listening: {sorted(ours - set(bound))}"
    loopback = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}
    assert all(addr in loopback for addr in bound.values()), bound


def test_down_leaves_nothing_then_up_brings_it_back_with_its_data(settings):
    before = pids(ensure_up())
    try:
        proc = infra("down", timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        for name in NAMES:
            assert f"{name}: " in proc.stdout
        for name, pid in before.items():
            assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2], name
        assert processes_under(settings.home) == []
        busy = [p for c in components(settings) for p in c.ports() if portlib.listening(settings.host, p, 0.3)]
        assert busy == [], f"still listening: {busy}"
        assert not list((settings.home / "run").glob("*.pid"))

        code, report = status()
        assert code == 1 and report["healthy"] is False
        assert {c["state"] for c in report["components"]} == {"stopped"}

        again = infra("down", timeout=120)
        assert again.returncode == 0 and "nothing was running" in again.stdout
    finally:
        proc = infra("up")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Warm start: the data survived, so nothing had to be created again.
    assert "created" not in proc.stdout, proc.stdout
    assert "schema up to date" in proc.stdout
    code, report = status()
    assert code == 0
    assert all(pid != before[name] for name, pid in pids(report).items())


def test_a_killed_server_is_noticed_and_only_it_is_restarted(settings):
    before = pids(ensure_up())
    os.kill(before["s3"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{before['s3']}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        code, report = status()
        assert code == 1
        s3 = next(c for c in report["components"] if c["name"] == "s3")
        assert s3["healthy"] is False and s3["pid"] is None
    finally:
        proc = infra("up")
    assert proc.returncode == 0, proc.stderr
    assert "started s3)" in proc.stdout
    code, report = status()
    after = pids(report)
    assert code == 0
    assert after["kafka"] == before["kafka"] and after["cassandra"] == before["cassandra"]
    assert after["s3"] != before["s3"]


def test_topics_buckets_and_schema_exist(settings):
    ensure_up()
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    from spotreel.platform.cql import cql_session
    from spotreel.platform.migrate import migrate
    from spotreel.platform.s3 import s3_client
    from spotreel.platform.seed import api_key_hash
    from spotreel.platform.topics import topic_specs

    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    topics = admin.list_topics(timeout=10).topics
    for spec in topic_specs(settings):
        assert spec.name in topics
        assert len(topics[spec.name].partitions) == settings.partitions
    events = f"{settings.topic_prefix}.events"
    (fut,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, events)]).values()
    assert fut.result(10)["retention.ms"].value == "-1"

    buckets = {b["Name"] for b in s3_client(settings).list_buckets()["Buckets"]}
    assert {settings.s3_bucket_artifacts, settings.s3_bucket_checkpoints} <= buckets

    with cql_session(settings, 20) as session:
        assert migrate(session, settings.cassandra_keyspace, lambda _: None) == []  # already applied
        versions = [r.version for r in session.execute("SELECT version FROM schema_migrations")]
        assert 1 in versions
        order = session.execute(
            "SELECT column_name, clustering_order FROM system_schema.columns "
            "WHERE keyspace_name = %s AND table_name = 'jobs_by_tenant'", (settings.cassandra_keyspace,))
        assert {r.column_name: r.clustering_order for r in order}["created_at"] == "desc"
        key = session.execute("SELECT tenant_id FROM api_keys WHERE key_hash = %s",
                              (api_key_hash(settings.dev_api_key),)).one()
        assert key.tenant_id == "dev"
