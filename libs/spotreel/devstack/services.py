"""The spotreel services in the local stack: scheduler, projector, gateway and the webhook notifier as
background processes.

They are `Server`s like Kafka and Cassandra (pid file, logs under logs/<name>/, probe, stop), started by
`up` only once every server answers and stopped by `down` before any server. Each runs `python -m
spotreel.cli <service>` with the *same* settings as the `up` that started it (passed as SPOTREEL_*
variables), so the default stack always uses the default topic prefix and keyspace, whatever a test
process around it overrides for itself.

Probes are real requests: the gateway's GET /healthz, and the Prometheus endpoints of the scheduler and the
projector on 127.0.0.1 (they start serving only once the process is wired: the projector after its
Cassandra session and migrations, the scheduler once its Faust app runs, the notifier once its keyspace is
migrated). Their ports are derived from the gateway's (gateway + 1, + 2, + 3; the gateway's own internal
metrics port + 4) so one setting moves the whole service block.
"""

from __future__ import annotations

import os
import re
import sys
import urllib.error
import urllib.request
from dataclasses import fields
from pathlib import Path

from spotreel.devstack.server import Server
from spotreel.platform.errors import ProbeFailed
from spotreel.platform.seed import LOCAL_REGISTRY_FILE, local_registry_text
from spotreel.devstack.settings import launcher_settings
from spotreel.config.settings import Settings


def scheduler_metrics_port(settings: Settings) -> int:
    return settings.gateway_port + 1


def projector_metrics_port(settings: Settings) -> int:
    return settings.gateway_port + 2


def webhooks_metrics_port(settings: Settings) -> int:
    return settings.gateway_port + 3


def gateway_metrics_port(settings: Settings) -> int:
    """The gateway's internal metrics endpoint; its public port serves no /metrics."""
    return settings.gateway_port + 4


def settings_env(settings: Settings) -> dict[str, str]:
    """Every setting, the launcher's too, as the SPOTREEL_* variable `DevstackSettings.from_env` reads back to
    the same value."""
    full = launcher_settings(settings)
    return {f"SPOTREEL_{f.name.upper()}": str(getattr(full, f.name)) for f in fields(full)}


def http_get(url: str, timeout: float) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - our own loopback URL
            if resp.status != 200:
                raise ProbeFailed(f"GET {url} answered {resp.status}")
            return resp.read(1 << 20).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        raise ProbeFailed(f"GET {url} answered {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ProbeFailed(f"GET {url} failed: {reason}") from None


class Service(Server):
    """A spotreel process: `python -m spotreel.cli <argv>`, its stdout is its log."""

    service = True

    def argv(self) -> list[str]:
        raise NotImplementedError

    def command(self) -> list[str]:
        return [sys.executable, "-m", "spotreel.cli", *self.argv()]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(settings_env(self.settings))
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def main_log(self) -> Path:
        return self.stdout_log

    def prepare(self, say) -> None:
        self.conf_dir.mkdir(parents=True, exist_ok=True)


class SchedulerService(Service):
    name = "scheduler"

    def port(self) -> int:
        return scheduler_metrics_port(self.settings)

    def address(self) -> str:
        return f"http://{self.settings.host}:{self.port()}/metrics"

    def ports(self) -> list[int]:
        return [self.port()]

    def faust_dir(self) -> Path:
        from spotreel.platform.topics import scheduler_app_id

        return self.data_dir / scheduler_app_id(self.settings)

    def prepare(self, say) -> None:
        super().prepare(say)
        self.data_dir.mkdir(parents=True, exist_ok=True)  # Faust creates only the last path component

    def argv(self) -> list[str]:
        return ["scheduler", "--metrics-port", str(self.port()), "--data-dir", str(self.faust_dir())]

    def probe(self, timeout: float) -> str:
        text = http_get(self.address(), timeout)
        if "spotreel_scheduler_commands" not in text:
            raise ProbeFailed(f"{self.address()} does not serve the scheduler's metrics")
        owned = sorted({int(p) for p in re.findall(r'spotreel_scheduler_consumer_lag\{partition="(\d+)"\}', text)})
        return f"owns partitions {owned}" if owned else "running, no partition assigned yet"


class ProjectorService(Service):
    name = "projector"

    def port(self) -> int:
        return projector_metrics_port(self.settings)

    def address(self) -> str:
        return f"http://{self.settings.host}:{self.port()}/metrics"

    def ports(self) -> list[int]:
        return [self.port()]

    def argv(self) -> list[str]:
        return ["projector", "--metrics-port", str(self.port())]

    def probe(self, timeout: float) -> str:
        text = http_get(self.address(), timeout)
        m = re.search(r"^spotreel_projection_lag ([0-9.e+-]+)$", text, re.M)
        if m is None:
            raise ProbeFailed(f"{self.address()} does not serve the projector's metrics")
        return f"projection lag {int(float(m.group(1)))} events"


class GatewayService(Service):
    """The public and worker API. Without SPOTREEL_MODEL_REGISTRY it validates against the local stack's
    registry, `$SPOTREEL_HOME/models.toml` (the tiny model; written here when missing, never overwritten), so
    an unknown model or a size the model cannot render is a 422 here too, not a job that fails on a worker."""

    name = "gateway"

    def registry(self) -> Path | None:
        """The local registry this gateway is given; None when the operator named one (it is in the settings)."""
        return None if self.settings.model_registry else self.settings.home / LOCAL_REGISTRY_FILE

    def prepare(self, say) -> None:
        super().prepare(say)
        path = self.registry()
        if path is not None and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(local_registry_text(self.settings.home), encoding="utf-8")

    def env(self) -> dict[str, str]:
        env = super().env()
        path = self.registry()
        if path is not None:
            env["SPOTREEL_MODEL_REGISTRY"] = str(path)
        return env

    def address(self) -> str:
        return self.settings.gateway_url

    def ports(self) -> list[int]:
        return [self.settings.gateway_port, gateway_metrics_port(self.settings)]

    def argv(self) -> list[str]:
        return ["gateway", "--metrics-port", str(gateway_metrics_port(self.settings))]

    def probe(self, timeout: float) -> str:
        body = http_get(f"{self.settings.gateway_url}/healthz", timeout)
        if '"ok"' not in body:
            raise ProbeFailed(f"GET /healthz answered {body[:80]!r}")
        return "healthz ok"


class WebhooksService(Service):
    name = "webhooks"

    def port(self) -> int:
        return webhooks_metrics_port(self.settings)

    def address(self) -> str:
        return f"http://{self.settings.host}:{self.port()}/metrics"

    def ports(self) -> list[int]:
        return [self.port()]

    def argv(self) -> list[str]:
        return ["webhooks", "--metrics-port", str(self.port())]

    def probe(self, timeout: float) -> str:
        text = http_get(self.address(), timeout)
        m = re.search(r"^spotreel_webhook_in_flight ([0-9.e+-]+)$", text, re.M)
        if m is None:
            raise ProbeFailed(f"{self.address()} does not serve the webhook notifier's metrics")
        return f"{int(float(m.group(1)))} webhooks in flight"


def services(settings: Settings) -> list[Server]:
    # Several of each, and HAProxy in front of several gateways, when `infra up --replicas` recorded a plan.
    from spotreel.devstack.replicated import expand

    return expand(settings, [SchedulerService(settings), ProjectorService(settings), GatewayService(settings),
                             WebhooksService(settings)])
