"""Prometheus on loopback: Debian's `prometheus` package (apt-get install -y prometheus), run under
SPOTREEL_HOME like Kafka and Cassandra, loading the repo's alert rules (monitoring/alerts.yml) and scraping
the targets listed in file-based service discovery files (<conf>/targets/*.json), which the tooling or a
person writes: one entry per process serving /metrics. Prometheus re-reads them without a restart. It also
serves the repo's console templates (monitoring/consoles/*.html) at /consoles/<name>.html: the operator view
a person can open on this machine without Grafana. Its alerts go to a local Alertmanager (Debian's
`prometheus-alertmanager`, also on loopback, clustering off) with the routes of monitoring/alertmanager.yml."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

from spotreel.platform.errors import InfraError, ProbeFailed
from spotreel.platform.scrape_targets import targets_dir
from spotreel.devstack.render import write_if_changed
from spotreel.devstack.server import Say, SinglePortServer
from spotreel.config.settings import Settings

MONITORING = Path(__file__).resolve().parents[3] / "monitoring"
RULES = MONITORING / "alerts.yml"
CONSOLES = MONITORING / "consoles"
ROUTES = MONITORING / "alertmanager.yml"


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        raise InfraError("prometheus: the `prometheus` binary was not found",
                         ["apt-get install -y prometheus (Debian's package, 2.42, brings promtool too)"])
    return found


def ready_probe(address: str, timeout: float) -> str:
    """Prometheus and Alertmanager both answer GET /-/ready once they serve."""
    try:
        with urllib.request.urlopen(f"{address}/-/ready", timeout=timeout) as resp:
            resp.read()
    except (urllib.error.URLError, OSError) as exc:
        raise ProbeFailed(f"{address}/-/ready: {exc}") from None
    return "ready"


class Prometheus(SinglePortServer):
    name = "prometheus"

    def __init__(self, settings: Settings, port: int | None = None, scrape_interval: str = "5s",
                 alertmanager: int | None = None) -> None:
        super().__init__(settings, port)
        self.scrape_interval = scrape_interval
        # Where alerts are sent (an Alertmanager that is not running only costs Prometheus a logged error).
        self.alertmanager_port = alertmanager if alertmanager is not None else self.settings.alertmanager_port

    def default_port(self) -> int:
        return self.settings.prometheus_port

    @property
    def targets_dir(self) -> Path:
        return targets_dir(self.settings)

    @property
    def consoles_dir(self) -> Path:
        return self.conf_dir / "consoles"

    def console_url(self, name: str = "spotreel") -> str:
        return f"{self.address()}/consoles/{name}.html"

    def render_config(self) -> str:
        # JSON is YAML; one file with no templating engine.
        config = {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.scrape_interval},
            "rule_files": [str(self.conf_dir / "alerts.yml")],
            "alerting": {"alertmanagers": [
                {"static_configs": [{"targets": [f"{self.settings.host}:{self.alertmanager_port}"]}]}]},
            "scrape_configs": [
                {"job_name": "prometheus", "static_configs": [{"targets": [f"{self.settings.host}:{self.port}"]}]},
                {"job_name": "spotreel",
                 "file_sd_configs": [{"files": [str(self.targets_dir / "*.json")], "refresh_interval": "5s"}]},
            ],
        }
        return json.dumps(config, indent=2) + "\n"

    def write_targets(self, name: str, targets: list[str], labels: dict[str, str] | None = None) -> Path:
        """One file_sd file: `targets` are host:port of processes serving /metrics."""
        self.targets_dir.mkdir(parents=True, exist_ok=True)
        path = self.targets_dir / f"{name}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"targets": targets, "labels": labels or {}}]) + "\n")
        tmp.replace(path)  # Prometheus must never read a half-written file
        return path

    def prepare(self, say: Say) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.targets_dir.mkdir(parents=True, exist_ok=True)
        write_if_changed(self.conf_dir / "alerts.yml", RULES.read_text())
        self.consoles_dir.mkdir(parents=True, exist_ok=True)
        for page in CONSOLES.glob("*.html"):
            write_if_changed(self.consoles_dir / page.name, page.read_text())
        write_if_changed(self.conf_dir / "prometheus.yml", self.render_config())

    def preflight(self) -> None:
        prometheus_binary()

    def command(self) -> list[str]:
        return [
            prometheus_binary(), f"--config.file={self.conf_dir / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.data_dir}", f"--web.listen-address={self.settings.host}:{self.port}",
            "--storage.tsdb.retention.time=2d",
            # The templates need no library of Prometheus' own: the same directory serves as the library path.
            f"--web.console.templates={self.consoles_dir}", f"--web.console.libraries={self.consoles_dir}",
        ]

    def probe(self, timeout: float) -> str:
        return ready_probe(self.address(), timeout)

    def query(self, promql: str, timeout: float = 5.0) -> list[dict]:
        """An instant query against the HTTP API; the result vector."""
        from urllib.parse import urlencode

        url = f"{self.address()}/api/v1/query?{urlencode({'query': promql})}"
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = json.load(resp)
        if body.get("status") != "success":
            raise InfraError(f"prometheus: query {promql!r} failed: {body}")
        return body["data"]["result"]


class Alertmanager(SinglePortServer):
    """Debian's prometheus-alertmanager on loopback, one instance (no cluster), routing by severity as
    monitoring/alertmanager.yml says. Its receivers send nothing anywhere: alerts wait in its API and UI
    (`amtool --alertmanager.url=... alert`) until someone adds a webhook, e-mail or pager integration."""

    name = "alertmanager"

    def default_port(self) -> int:
        return self.settings.alertmanager_port

    def preflight(self) -> None:
        if shutil.which("prometheus-alertmanager") is None:
            raise InfraError("alertmanager: the `prometheus-alertmanager` binary was not found",
                             ["apt-get install -y prometheus-alertmanager (Debian's package, 0.25)"])

    def prepare(self, say: Say) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        write_if_changed(self.conf_dir / "alertmanager.yml", ROUTES.read_text())

    def command(self) -> list[str]:
        return [
            str(shutil.which("prometheus-alertmanager")), f"--config.file={self.conf_dir / 'alertmanager.yml'}",
            f"--storage.path={self.data_dir}", f"--web.listen-address={self.settings.host}:{self.port}",
            "--cluster.listen-address=",  # empty turns clustering off: no gossip listener at all (one instance)
        ]

    def probe(self, timeout: float) -> str:
        return ready_probe(self.address(), timeout)

    def alerts(self, timeout: float = 5.0) -> list[dict]:
        """The alerts it holds (API v2)."""
        with urllib.request.urlopen(f"{self.address()}/api/v2/alerts", timeout=timeout) as resp:
            return json.load(resp)
