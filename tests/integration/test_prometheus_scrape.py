"""The real Prometheus (Debian's package) started by the infra tooling on loopback, scraping running metrics
endpoints found through file_sd (the scheduler's registry; then one of every kind of process, the gateway as
a real process); the HTTP API's `up` says the scrape succeeded. No prometheus binary here fails the test."""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml
from prometheus_client import start_http_server

from spotreel.devstack.monitoring import Prometheus
from spotreel.platform.ports import free_port
from spotreel.services.scheduler.metrics import Metrics
from spotreel.config.settings import Settings

ALERT_RULES = [r for g in yaml.safe_load((Path(__file__).parents[2] / "monitoring" / "alerts.yml").read_text())["groups"]
               for r in g["rules"]]


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
        # every rule of monitoring/alerts.yml loaded
        assert len([r for g in groups for r in g["rules"]]) == len(ALERT_RULES)
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
           "SPOTREEL_PROMETHEUS_PORT": str(free_port("127.0.0.1")),
           "SPOTREEL_ALERTMANAGER_PORT": str(free_port("127.0.0.1"))}
    cli = [sys.executable, "-m", "spotreel.cli", "infra", "monitoring"]
    up = subprocess.run([*cli, "up"], env=env, capture_output=True, text=True, timeout=120)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        targets = tmp_path / "home" / "run" / "prometheus" / "targets"
        assert sorted(p.name for p in targets.glob("*.json")) == [
            "gateway.json", "projector.json", "scheduler.json", "webhooks.json"]
        status = subprocess.run([*cli, "status", "--json"], env=env, capture_output=True, text=True, timeout=60)
        assert status.returncode == 0 and json.loads(status.stdout)["healthy"] is True, status.stdout
        assert [c["name"] for c in json.loads(status.stdout)["components"]] == ["prometheus", "alertmanager"]
    finally:
        down = subprocess.run([*cli, "down"], env=env, capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stdout + down.stderr
    status = subprocess.run([*cli, "status"], env=env, capture_output=True, text=True, timeout=60)
    assert status.returncode == 1, status.stdout


def _http(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_prometheus_scrapes_every_kind_of_process(stack, settings: Settings, tmp_path: Path) -> None:
    """The gateway as a real process (its metrics on the internal port, none on the public one), and each other
    process's registry served the way that process serves it: scheduler, projector, webhooks, capacity
    manager, and a worker that announces itself through a file_sd file of its own. All up=1, and the
    operator view (console template) renders them."""
    import os
    import signal
    import subprocess
    import sys

    from spotreel.services.capacity.metrics import CapacityMetrics
    from spotreel.services.projector.service import metrics_registry as projector_registry
    from spotreel.services.webhooks.metrics import WebhookMetrics
    from spotreel.worker.metrics import WorkerMetrics, announce, withdraw

    mine = dataclasses.replace(settings, home=tmp_path / "home")
    host = mine.host
    prom = Prometheus(mine, port=free_port(host), scrape_interval="1s")
    gw_port, gw_metrics = free_port(host), free_port(host)
    gateway = subprocess.Popen(
        [sys.executable, "-m", "spotreel.cli", "gateway", "--port", str(gw_port), "--metrics-port", str(gw_metrics)],
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "gateway.log").open("w"), start_new_session=True)
    worker, capacity = WorkerMetrics(), CapacityMetrics()
    worker.step.labels("tiny-t2v@any").observe(0.2)
    capacity.desired.labels("tiny-t2v@any").set(2)
    served = {"scheduler": start_http_server(free_port(host), addr=host, registry=Metrics().registry),
              "projector": start_http_server(free_port(host), addr=host, registry=projector_registry()[0]),
              "webhooks": start_http_server(free_port(host), addr=host,
                                            registry=WebhookMetrics.create().registry),
              "capacity": capacity.serve(free_port(host), host)}
    worker_port = free_port(host)
    served["worker"] = worker.serve(worker_port, host)
    lines: list[str] = []
    announced = None
    try:
        prom.preflight()
        for name, (server, _) in served.items():
            if name != "worker":
                prom.write_targets(name, [f"{host}:{server.server_port}"], {"service": name})
        prom.write_targets("gateway", [f"{host}:{gw_metrics}"], {"service": "gateway"})
        assert prom.ensure_up(lines.append) is True
        announced = announce(prom.targets_dir, "w-scrape-1", host, worker_port)  # as `spotreel worker` does
        assert announced is not None and announced.parent == prom.targets_dir
        want = {"scheduler", "projector", "webhooks", "capacity", "worker", "gateway"}
        deadline = time.monotonic() + 60
        up: dict[str, str] = {}
        while time.monotonic() < deadline:
            up = {s["metric"].get("service", ""): s["value"][1] for s in prom.query('up{job="spotreel"}')}
            if set(up) >= want and all(up[s] == "1" for s in want):
                break
            assert gateway.poll() is None, (tmp_path / "gateway.log").read_text()[-2000:]
            time.sleep(0.5)
        assert {s: up.get(s) for s in want} == {s: "1" for s in want}, up
        # The gateway's public port serves no metrics; the internal one does.
        assert _http(f"http://{host}:{gw_port}/metrics")[0] == 401
        status, body = _http(f"http://{host}:{gw_metrics}/metrics")
        assert status == 200 and "spotreel_gateway_request_seconds" in body
        worker_ids = {s["metric"].get("worker_id") for s in prom.query('spotreel_worker_step_seconds_count')}
        assert worker_ids == {"w-scrape-1"}
        status, page = _http(prom.console_url())
        assert status == 200, page
        assert "spotreel - operator view" in page and f"{host}:{worker_port}" in page
        # A worker that exits takes its target away.
        withdraw(announced)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and prom.query('up{job="spotreel",service="worker"}'):
            time.sleep(0.5)
        assert prom.query('up{job="spotreel",service="worker"}') == []
    finally:
        withdraw(announced)
        prom.stop(lines.append)
        os.killpg(gateway.pid, signal.SIGTERM)
        gateway.wait(30)
        for server, thread in served.values():
            server.shutdown()
            thread.join(5)
    assert prom.running() is None


def test_a_firing_alert_reaches_alertmanager(settings: Settings, tmp_path: Path) -> None:
    """A dead letter counted by a scheduler's registry makes SpotreelDLQGrowth fire (no `for:`); Prometheus
    sends it to the real Alertmanager, which holds it routed to the `ticket` receiver (its severity)."""
    from spotreel.devstack.monitoring import Alertmanager

    mine = dataclasses.replace(settings, home=tmp_path / "home")
    am = Alertmanager(mine, port=free_port(mine.host))
    prom = Prometheus(mine, port=free_port(mine.host), scrape_interval="1s", alertmanager=am.port)
    metrics = Metrics()
    server, thread = start_http_server(free_port(mine.host), addr=mine.host, registry=metrics.registry)
    lines: list[str] = []
    try:
        for s in (am, prom):
            s.preflight()
        prom.write_targets("scheduler", [f"{mine.host}:{server.server_port}"], {"service": "scheduler"})
        assert am.ensure_up(lines.append) is True and prom.ensure_up(lines.append) is True
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not prom.query("spotreel_scheduler_commands_total"):
            time.sleep(0.5)
        metrics.deadletters.labels("undecodable").inc()  # after the first scrape: an increase
        deadline = time.monotonic() + 60
        held: list[dict] = []
        while time.monotonic() < deadline:
            held = [a for a in am.alerts() if a["labels"].get("alertname") == "SpotreelDLQGrowth"]
            if held:
                break
            time.sleep(0.5)
        assert held, prom.query("ALERTS")
        alert = held[0]
        assert alert["labels"]["reason"] == "undecodable" and alert["labels"]["severity"] == "ticket"
        assert [r["name"] for r in alert["receivers"]] == ["ticket"]
        assert alert["status"]["state"] == "active"
    finally:
        prom.stop(lines.append)
        am.stop(lines.append)
        server.shutdown()
        thread.join(5)
    assert prom.running() is None and am.running() is None
