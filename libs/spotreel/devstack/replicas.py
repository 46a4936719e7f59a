"""Several processes per spotreel service in the local stack: `spotreel infra up --replicas gateway=2,...`.

The plan (how many of each service, and the ports of the extra processes) is recorded in
`run/replicas.json` under the stack's home, so `up` without `--replicas` (a restart after a crash), `down`
and `status` all see the same processes; a later `--replicas` replaces it (all 1: the file is removed).

What each count means:
- scheduler N: N Faust processes in the scheduler's one consumer group; Kafka shares the commands
  partitions between them and moves a dead one's partitions to the others (session timeout 6 s).
- projector N, webhooks N: N members of `<prefix>.projector` / `<prefix>.webhooks` (and the janitor's
  group), sharing the events partitions.
- gateway N > 1: N gateways on ports of their own, behind HAProxy (haproxy.py) on the gateway's usual
  address (`settings.gateway_url`), which hashes a worker's `/internal/workers/{id}/...` requests onto one
  gateway (the lease desk's state is per process: services/gateway/README.md, "Several gateways").

Replica 1 keeps its usual name, pid file and ports (the gateway's public port goes to HAProxy, so with
N > 1 replica 1 serves on a port of the plan too); replica i > 1 is `<service>-i`. Extra ports are chosen
free once, from `gateway_port + 10` upwards, and kept in the plan so a restarted process gets its old port.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from spotreel.platform import ports as portlib
from spotreel.devstack.layout import Layout
from spotreel.platform.errors import InfraError
from spotreel.config.settings import Settings

SERVICES = ("gateway", "scheduler", "projector", "webhooks")
MAX_REPLICAS = 16
FIRST_EXTRA_PORT_OFFSET = 10


def parse(text: str) -> dict[str, int]:
    """`gateway=2,scheduler=2` -> every service's count (unnamed ones 1)."""
    counts = dict.fromkeys(SERVICES, 1)
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in SERVICES:
            raise InfraError(f"--replicas: {part!r} is not SERVICE=N", [f"services: {', '.join(SERVICES)}"])
        try:
            n = int(value)
        except ValueError:
            n = 0
        if not 1 <= n <= MAX_REPLICAS:
            raise InfraError(f"--replicas: {name}={value.strip()}: a count from 1 to {MAX_REPLICAS}")
        counts[name] = n
    return counts


@dataclass(frozen=True)
class Plan:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SERVICES, 1))
    # service -> [public port, metrics port] per gateway, [metrics port] per other extra replica; keyed
    # "gateway-1", "scheduler-2", ...
    ports: dict[str, list[int]] = field(default_factory=dict)
    # Shared by the gateways, so a page token one of them made is read by the others (pagetokens.py).
    token_key: str = ""

    def count(self, service: str) -> int:
        return self.counts.get(service, 1)

    @property
    def single(self) -> bool:
        return all(n == 1 for n in self.counts.values())

    def describe(self) -> str:
        return ",".join(f"{s}={self.count(s)}" for s in SERVICES)

    def to_json(self) -> str:
        return json.dumps({"counts": self.counts, "ports": self.ports, "token_key": self.token_key}, indent=2)


def plan_file(settings: Settings) -> Path:
    return Layout.of(settings).run_root / "replicas.json"


def load(settings: Settings) -> Plan:
    """The recorded plan; one of each when none is (or the file is unreadable: `up --replicas` rewrites it)."""
    try:
        raw = json.loads(plan_file(settings).read_text())
        return Plan({s: int(raw["counts"].get(s, 1)) for s in SERVICES},
                    {k: [int(p) for p in v] for k, v in raw.get("ports", {}).items()}, str(raw.get("token_key", "")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return Plan()


def slots(counts: dict[str, int]) -> list[tuple[str, int]]:
    """(name, how many ports) of every process that needs ports of the plan."""
    out: list[tuple[str, int]] = []
    if counts.get("gateway", 1) > 1:
        out += [(f"gateway-{i}", 2) for i in range(1, counts["gateway"] + 1)]
    for service in SERVICES[1:]:
        out += [(f"{service}-{i}", 1) for i in range(2, counts.get(service, 1) + 1)]
    return out


def make_plan(settings: Settings, counts: dict[str, int], old: Plan | None = None,
              taken: set[int] | None = None) -> Plan:
    """A plan for `counts` that keeps the ports `old` gave a process and picks free ones for the rest."""
    old = old or Plan()
    used = set(taken or ())
    ports: dict[str, list[int]] = {}
    wanted = slots(counts)
    for name, n in wanted:
        if len(old.ports.get(name, [])) == n:
            ports[name] = list(old.ports[name])
            used.update(ports[name])
    candidate = settings.gateway_port + FIRST_EXTRA_PORT_OFFSET
    for name, n in wanted:
        if name in ports:
            continue
        got: list[int] = []
        while len(got) < n:
            if candidate > 65535:
                raise InfraError("--replicas: no free ports left above the gateway's")
            if candidate not in used and portlib.bindable(settings.host, candidate):
                got.append(candidate)
                used.add(candidate)
            candidate += 1
        ports[name] = got
    token = old.token_key or settings.gateway_token_key or secrets.token_hex(32)
    return Plan(dict(counts), ports, token if counts.get("gateway", 1) > 1 else "")


def save(settings: Settings, plan: Plan) -> None:
    path = plan_file(settings)
    if plan.single:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(plan.to_json() + "\n")
    tmp.replace(path)
