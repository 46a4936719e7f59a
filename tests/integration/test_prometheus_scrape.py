"""The real Prometheus (Debian's package) started by the infra tooling on loopback, scraping a running
metrics endpoint (the scheduler's registry, served as the scheduler serves it) found through file_sd; the
HTTP API's `up` says the scrape succeeded. No prometheus binary here fails the test."""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.request
from pathlib import Path

from prometheus_client import start_http_server

from spotreel.infra.monitoring import Prometheus
from spotreel.infra.ports import free_port
from spotreel.services.scheduler.metrics import Metrics
from spotreel.settings import Settings


def test_prometheus_scrapes_a_running_process(settings: Settings, tmp_path: Path) -> None:
    mine = dataclasses.replace(settings, home=tmp_path / "home")
    prom = Prometheus(mine, port=free_port(mine.host), scrape_interval="1s")
    metrics = Metrics()
    metrics.lag.labels("0").set(7)
    target_port = free_port(mine.host)
    server, thread = start_http_server(target_port, addr=mine.host, registry=metrics.registry)
    lines: list[str] = []
    try:
        prom.preflight()
        prom.write_targets("scheduler", [f"{mine.host}:{target_port}"], {"service": "scheduler"})
        assert prom.ensure_up(lines.append) is True
        assert prom.address().startswith("http://127.0.0.1:")
        deadline = time.monotonic() + 30
        up: list[dict] = []
        while time.monotonic() < deadline:
            up = prom.query('up{job="spotreel",service="scheduler"}')
            if up and up[0]["value"][1] == "1":
                break
            time.sleep(0.5)
        assert up and up[0]["value"][1] == "1", up
        assert up[0]["metric"]["instance"] == f"{mine.host}:{target_port}"
        lag = prom.query('spotreel_scheduler_consumer_lag{service="scheduler"}')
        assert [s["value"][1] for s in lag] == ["7"]
        with urllib.request.urlopen(f"{prom.address()}/api/v1/rules", timeout=5) as resp:
            groups = json.load(resp)["data"]["groups"]
        assert len([r for g in groups for r in g["rules"]]) == 8  # monitoring/alerts.yml loaded
        assert prom.query("ALERTS") == []  # and nothing fires on this quiet process
    finally:
        prom.stop(lines.append)
        server.shutdown()
        thread.join(5)
    assert prom.running() is None


def test_cli_monitoring_up_writes_the_stack_services_targets_and_down_stops_it(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "SPOTREEL_HOME": str(tmp_path / "home"),
           "SPOTREEL_PROMETHEUS_PORT": str(free_port("127.0.0.1"))}
    cli = [sys.executable, "-m", "spotreel.cli", "infra", "monitoring"]
    up = subprocess.run([*cli, "up"], env=env, capture_output=True, text=True, timeout=120)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        targets = tmp_path / "home" / "run" / "prometheus" / "targets"
        assert sorted(p.name for p in targets.glob("*.json")) == [
            "gateway.json", "projector.json", "scheduler.json", "webhooks.json"]
        status = subprocess.run([*cli, "status", "--json"], env=env, capture_output=True, text=True, timeout=60)
        assert status.returncode == 0 and json.loads(status.stdout)["healthy"] is True, status.stdout
    finally:
        down = subprocess.run([*cli, "down"], env=env, capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stdout + down.stderr
    status = subprocess.run([*cli, "status"], env=env, capture_output=True, text=True, timeout=60)
    assert status.returncode == 1, status.stdout
