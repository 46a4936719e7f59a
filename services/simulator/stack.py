"""A private set of spotreel services for one simulation, on the running Kafka and Cassandra.

Own topic prefix, keyspace, home directory and ports, so a simulation neither disturbs nor is disturbed by
the shared services; its scheduler, projector and gateway are the real ones (`python -m spotreel.cli …`),
started and stopped through the same `Service` classes as `infra up`. Also: CPU time of processes from
/proc, and the events of the run read back from Kafka.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from spotreel.devstack import replicas
from spotreel.platform.ports import bindable
from spotreel.devstack.services import services
from spotreel.devstack.stack import components
from spotreel.platform.seed import local_registry_text
from spotreel.config.settings import Settings

_TICKS = os.sysconf("SC_CLK_TCK")


def _free_block(host: str, start: int = 21000, stop: int = 29000) -> int:
    """A port p with p .. p+4 free: the gateway, the scheduler's, projector's and webhooks' metrics, and the
    gateway's own internal metrics port (devstack/services.py)."""
    for p in range(start + os.getpid() % 997 * 7, stop, 5):
        if all(bindable(host, p + i) for i in range(5)):
            return p
    raise RuntimeError("no five consecutive free ports found for the private services")


def sim_registry(home: Path, model: str) -> str:
    """The private gateway's model registry: the local stack's (the tiny model, which real workers of this
    plane render) and the simulated model (no worker loads it, so no directory is read), within the gateway's
    own limits otherwise."""
    return (local_registry_text(home) + f'\n[models.{model}]\ndirectory = "/simulated/{model}"\nfamily = "unet3d"\n'
            "sizes = { multiple = 8, min = 16, max = 1920 }\nframes = { max = 3600 }\nsteps = { max = 500 }\n")


def announce(base: Settings, private: Settings, run_id: str) -> list[Path]:
    """If the local Prometheus (`spotreel infra monitoring up` of `base`) keeps its targets directory, add the
    private services' metrics endpoints to it, labelled with their service and topic_prefix, so it scrapes
    the run (the gateway's submit ack is read from there by `spotreel slo --prometheus`); [] if not."""
    from spotreel.devstack.monitoring import Prometheus
    from spotreel.devstack.replicated import metrics_targets

    prom = Prometheus(base)
    if not prom.targets_dir.is_dir():
        return []
    return [prom.write_targets(f"sim-{run_id}-{name}", targets,
                               {"service": name, "topic_prefix": private.topic_prefix})
            for name, targets in metrics_targets(private).items()]


def parse_replicas(text: str) -> dict[str, int]:
    """`simulate --replicas TEXT` -> every service's count; ValueError for a bad count, or for several gateways
    without HAProxy on this machine (they sit behind one)."""
    from spotreel.devstack.haproxy import haproxy_binary
    from spotreel.platform.errors import InfraError

    try:
        counts = replicas.parse(text)
        if counts["gateway"] > 1:
            haproxy_binary()
    except InfraError as exc:
        raise ValueError("; ".join([exc.message, *exc.hints])) from exc
    return counts


def plan_replicas(settings: Settings, counts: dict[str, int] | None) -> replicas.Plan:
    """`simulate --replicas`: record a replica plan in the private home, as `infra up --replicas` does in the
    stack's, so `services()` starts several processes of a service (and HAProxy in front of several
    gateways); ports of the plan are picked free above the private block."""
    plan = replicas.make_plan(settings, counts or dict.fromkeys(replicas.SERVICES, 1),
                              taken={settings.gateway_port + i for i in range(5)})
    replicas.save(settings, plan)
    return plan


class PrivateStack:
    def __init__(self, base: Settings, run_id: str, partitions: int, say: Callable[[str], None] = print,
                 replica_counts: dict[str, int] | None = None) -> None:
        self.base = base
        self.say = say
        home = base.home.parent / "spotreel-sim" / run_id
        # A registry of its own, naming the simulated model: the gateway checks every submission against one.
        self.settings = replace(base, home=home, topic_prefix=f"sim.{run_id}", cassandra_keyspace=f"sim_{run_id}",
                                gateway_port=_free_block(base.host), partitions=partitions,
                                model_registry=str(home / "models.toml"))
        self.replicas = plan_replicas(self.settings, replica_counts)
        self.servers = services(self.settings)
        self.model = f"sim-{run_id}"
        self.worker_key = ""
        self.tenant_keys: dict[str, str] = {}
        self.run_id = run_id
        self.announced: list[Path] = []

    @property
    def url(self) -> str:
        return self.settings.gateway_url

    def start(self, tenants: list[str], quota: int) -> None:
        from spotreel.adapters.kafka import ensure_scheduler_topics
        from spotreel.platform.cql import cql_session
        from spotreel.platform.migrate import migrate
        from spotreel.tenancy import create_tenant, create_worker_key

        s = self.settings
        registry = Path(s.model_registry)
        registry.parent.mkdir(parents=True, exist_ok=True)
        registry.write_text(sim_registry(s.home, self.model), encoding="utf-8")
        ensure_scheduler_topics(s)
        with cql_session(s) as session:
            migrate(session, s.cassandra_keyspace, say=lambda *_: None)
            for t in tenants:
                self.tenant_keys[t] = create_tenant(session, t, rate_per_minute=quota * 60, max_in_flight=quota)
            self.worker_key = create_worker_key(session, "sim-fleet")
        for server in self.servers:
            server.ensure_up(self.say)
        self.announced = announce(self.base, self.settings, self.run_id)
        if self.announced:
            self.say(f"simulation {self.run_id}: the local Prometheus scrapes the private services "
                     f"(topic_prefix={self.settings.topic_prefix})")

    def pids(self) -> dict[str, int]:
        """Every process worth watching: the private services and the shared servers they use."""
        out = {}
        for server in [*self.servers, *(c for c in components(self.base) if not c.service)]:
            running = server.running()
            if running is not None:
                out[server.name] = running.pid
        out["simulator"] = os.getpid()
        return out

    def stop(self, drop: bool = True) -> None:
        for path in self.announced:  # what Prometheus scraped stays in its database
            path.unlink(missing_ok=True)
        self.announced = []
        for server in reversed(self.servers):
            try:
                server.stop(self.say)
            except Exception as exc:  # keep stopping the others
                self.say(f"{server.name}: stop failed: {exc}")
        if drop:
            from spotreel.adapters.kafka import delete_topics
            from spotreel.platform.cql import cql_session

            delete_topics(self.settings)
            with cql_session(self.settings) as session:
                session.execute(f"DROP KEYSPACE IF EXISTS {self.settings.cassandra_keyspace}")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU of a process and its children (a Java or Python service may fork helpers)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    own = (int(fields[11]) + int(fields[12])) / _TICKS
    if pid == os.getpid():
        return own  # our own children are the services, counted on their own
    return own + sum(cpu_seconds(c) or 0.0 for c in _children(pid))


def machine_busy_seconds() -> float:
    """CPU-seconds the whole machine spent not idle (all cores), from /proc/stat."""
    parts = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(x) for x in parts]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / _TICKS


class CpuWindow:
    """CPU used per named process between `start()` and `read()`, in cores (1.0 = one core busy)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.t0 = 0.0
        self.before: dict[str, float | None] = {}
        self.busy0 = 0.0

    def start(self) -> None:
        self.t0 = time.monotonic()
        self.before = {n: cpu_seconds(p) for n, p in self.pids.items()}
        self.busy0 = machine_busy_seconds()

    def read(self) -> dict[str, Any]:
        dt = max(1e-6, time.monotonic() - self.t0)
        cores = {}
        for n, p in self.pids.items():
            now, then = cpu_seconds(p), self.before.get(n)
            if now is not None and then is not None:
                cores[n] = round((now - then) / dt, 3)
        return {"cpu_cores": cores, "cpu_cores_total": round((machine_busy_seconds() - self.busy0) / dt, 3),
                "seconds": round(dt, 1)}


def _read(settings: Settings, topic: str, partitions: Iterable[int], keys: set[bytes] | None = None,
          also: Callable[[bytes], bool] | None = None, lenient: bool = False) -> Iterator[tuple[int, Any]]:
    """(append ms, decoded) of the records of these partitions of `topic`; with `keys`, only those keyed by
    one of them or whose key `also` takes. With `keys` or `lenient`, a record the codec refuses (a poison
    command, which the scheduler dead-letters) is passed over; otherwise every record must decode."""
    from spotreel.adapters.kafka import read_partition
    from spotreel.codec import Codec, CodecError

    codec = Codec.default()
    for p in partitions:
        for msg in read_partition(settings.kafka_bootstrap, topic, p, timeout=30.0):
            if msg.value() is None or (keys is not None and msg.key() not in keys
                                       and (also is None or not also(msg.key() or b""))):
                continue
            try:
                yield msg.timestamp()[1], codec.decode_message(msg.value())
            except CodecError:
                if keys is None and not lenient:
                    raise


def read_events(settings: Settings) -> list[Any]:
    """Every event of the run's events topic, decoded."""
    from spotreel.platform.topics import events_topic

    return [event for _, event in _read(settings, events_topic(settings), range(settings.partitions))]


def read_command_mix(settings: Settings) -> dict[str, int]:
    """Records of the run's commands topic by type, and `renewals_in_batches` / `requests_in_batches`: the
    renewals and lease requests the gateways' RenewalBatch records carried (their ratios to the batches are
    what a record carried); `idle_in_pulses`: the idle workers the gateways' pulses vouched for."""
    from spotreel.domain.commands import GatewayPulse, RenewalBatch
    from spotreel.platform.topics import commands_topic

    mix: dict[str, int] = {}
    for _, record in _read(settings, commands_topic(settings), range(settings.partitions), keys=None, lenient=True):
        name = type(record).__name__
        mix[name] = mix.get(name, 0) + 1
        if isinstance(record, RenewalBatch):
            mix["renewals_in_batches"] = mix.get("renewals_in_batches", 0) + len(record.renewals)
            mix["requests_in_batches"] = mix.get("requests_in_batches", 0) + len(record.requests)
        elif isinstance(record, GatewayPulse):
            mix["idle_in_pulses"] = mix.get("idle_in_pulses", 0) + len(record.idle)
    return mix


def read_job_records(settings: Settings, job_ids: set[str]) -> list[tuple[int, str, Any]]:
    """(append ms, topic kind, decoded) of every command and reply of one of `job_ids`, from their partitions
    of the run's commands and replies topics: what a lost lease's holder sent and was answered. The
    renewals a gateway sent in a RenewalBatch, and their replies in a RenewalReplies, each as its own record."""
    from spotreel.adapters.kafka import BATCH_REPLY_KEY_PREFIX
    from spotreel.adapters.partitioning import partition_for
    from spotreel.domain.commands import RenewalBatch
    from spotreel.domain.events import RenewalReplies
    from spotreel.platform.topics import commands_topic, replies_topic

    keys = {j.encode() for j in job_ids}
    partitions = sorted({partition_for(j, settings.partitions) for j in job_ids})
    found: list[tuple[int, str, Any]] = []
    for kind, topic in (("command", commands_topic(settings)), ("reply", replies_topic(settings))):
        # A batch is keyed by its gateway (a command) or `~batch:<gateway>` (a reply): those are read too.
        batches: Callable[[bytes], bool] = ((lambda key: True) if kind == "command"
                                            else (lambda key: key.startswith(BATCH_REPLY_KEY_PREFIX)))
        for at, record in _read(settings, topic, partitions, keys, also=batches):
            if isinstance(record, RenewalBatch):
                found += [(at, kind, command) for command, _ in record.commands()
                          if getattr(command, "job_id", None) in job_ids]
            elif isinstance(record, RenewalReplies):
                found += [(at, kind, r) for r in (*record.renewed, *record.progressed) if r.job_id in job_ids]
            elif getattr(record, "job_id", None) in job_ids:
                found.append((at, kind, record))
    return found
