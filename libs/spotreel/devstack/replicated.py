"""The processes of a replica plan (replicas.py) as `Server`s, next to the one-of-each services.

`expand` is what `services.services` returns through: with the recorded plan all 1 it changes nothing;
otherwise it adds `scheduler-2`, `projector-2`, ... and, for gateway N > 1, moves every gateway onto the
plan's ports and puts HAProxy (haproxy.py) on the gateway's usual address. HAProxy starts and stops with the
services, in parallel; it is ready once one gateway passes its health check (its own probe).
"""

from __future__ import annotations

from spotreel.devstack import replicas
from spotreel.devstack.haproxy import HAProxy
from spotreel.devstack.server import Say, Server
from spotreel.devstack.services import (GatewayService, ProjectorService, SchedulerService, WebhooksService,
                                        gateway_metrics_port, http_get, services)
from spotreel.platform.errors import ProbeFailed
from spotreel.config.settings import Settings


class _Replica:
    """Mixed into a service class: its own name (pid file, logs, data dir) and metrics port."""

    def __init__(self, settings: Settings, name: str, metrics_port: int) -> None:
        super().__init__(settings)  # type: ignore[call-arg]
        self.name = name
        self._metrics_port = metrics_port

    def port(self) -> int:
        return self._metrics_port


class SchedulerReplica(_Replica, SchedulerService):
    pass


class ProjectorReplica(_Replica, ProjectorService):
    pass


class WebhooksReplica(_Replica, WebhooksService):
    pass


class GatewayReplica(GatewayService):
    """One of several gateways: its own public and metrics ports, the plan's shared page-token key."""

    def __init__(self, settings: Settings, name: str, port: int, metrics_port: int, token_key: str) -> None:
        super().__init__(settings)
        self.name = name
        self.public_port = port
        self.metrics_port = metrics_port
        self.token_key = token_key

    def address(self) -> str:
        return f"http://{self.settings.host}:{self.public_port}"

    def ports(self) -> list[int]:
        return [self.public_port, self.metrics_port]

    def argv(self) -> list[str]:
        return ["gateway", "--port", str(self.public_port), "--metrics-port", str(self.metrics_port)]

    def env(self) -> dict[str, str]:
        env = super().env()
        if not self.settings.gateway_token_key and self.token_key:
            env["SPOTREEL_GATEWAY_TOKEN_KEY"] = self.token_key
        return env

    def probe(self, timeout: float) -> str:
        body = http_get(f"{self.address()}/healthz", timeout)
        if '"ok"' not in body:
            raise ProbeFailed(f"GET /healthz answered {body[:80]!r}")
        return "healthz ok"


_PLANNED = (GatewayReplica, SchedulerReplica, ProjectorReplica, WebhooksReplica, HAProxy)


def gateways(settings: Settings, plan: replicas.Plan) -> list[GatewayReplica]:
    out = []
    for i in range(1, plan.count("gateway") + 1):
        port, metrics = plan.ports[f"gateway-{i}"]
        out.append(GatewayReplica(settings, "gateway" if i == 1 else f"gateway-{i}", port, metrics, plan.token_key))
    return out


def expand(settings: Settings, base: list[Server], plan: replicas.Plan | None = None) -> list[Server]:
    plan = plan if plan is not None else replicas.load(settings)
    if plan.single:
        return base
    out: list[Server] = []
    extra = {"scheduler": SchedulerReplica, "projector": ProjectorReplica, "webhooks": WebhooksReplica}
    for comp in base:
        if isinstance(comp, GatewayService) and plan.count("gateway") > 1:
            out += gateways(settings, plan)
            continue
        out.append(comp)
        kind = extra.get(comp.name)
        for i in range(2, plan.count(comp.name) + 1 if kind else 0):
            name = f"{comp.name}-{i}"
            out.append(kind(settings, name, plan.ports[name][0]))
    if plan.count("gateway") > 1:
        out.append(HAProxy(settings, [(g.name, g.public_port) for g in gateways(settings, plan)]))
    return out


def apply(settings: Settings, text: str, say: Say) -> replicas.Plan:
    """`up --replicas TEXT`: record the plan; when it changes, stop the services the old plan ran first (the
    servers keep running), so `up` starts each process where the new plan puts it."""
    from spotreel.devstack.layout import Layout
    from spotreel.devstack.stack import components, infra_lock

    counts = replicas.parse(text)
    layout = Layout.of(settings)
    layout.ensure_writable()
    with infra_lock(layout, say):
        old = replicas.load(settings)
        if counts == old.counts:
            return old
        base = _base(settings)
        running = [c for c in expand(settings, base, old) if c.running() is not None]
        for comp in running:
            comp.stop(say)
        # Never a port of the servers or of the one-of-each services.
        taken = {p for c in [*components(settings), *base] if not isinstance(c, _PLANNED) for p in c.ports()}
        plan = replicas.make_plan(settings, counts, old, taken)
        replicas.save(settings, plan)
    say(f"replicas: {plan.describe()}" + (f" (recorded in {replicas.plan_file(settings)})" if not plan.single else ""))
    return plan


def _base(settings: Settings) -> list[Server]:
    return [SchedulerService(settings), ProjectorService(settings), GatewayService(settings),
            WebhooksService(settings)]


def metrics_targets(settings: Settings) -> dict[str, list[str]]:
    """Per service, `host:port` of every process's Prometheus endpoint, replicas included (HAProxy has none)."""
    out: dict[str, list[str]] = {}
    for comp in services(settings):
        if isinstance(comp, HAProxy):
            continue
        if isinstance(comp, GatewayReplica):
            port = comp.metrics_port
        elif isinstance(comp, GatewayService):
            port = gateway_metrics_port(settings)
        else:
            port = comp.port()  # type: ignore[attr-defined]
        out.setdefault(comp.name.split("-")[0], []).append(f"{settings.host}:{port}")
    return out
