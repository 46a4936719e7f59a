"""The Kafka topics spotreel relies on, declared idempotently (created if missing, configs enforced): the
one catalogue of topic names and settings, and the one create-if-missing (`create_missing`).

Names: `<prefix>.commands`, `<prefix>.events`, `<prefix>.replies`, `<prefix>.commands.deadletter`,
`<prefix>.pool-stats`, `<prefix>.worker-leases`, `<prefix>.tenant-usage`, `<prefix>.tenants`, and
for each scheduler table `<prefix>.scheduler-<table>-changelog`. The changelog name is what Faust itself
derives (`{app.id}-{table}-changelog`) when the scheduler's app id is `scheduler_app_id(settings)`, so
the topic declared here and the one Faust expects are the same. Two more are created by the service that
needs them rather than by `infra up`: `<prefix>.assignments` (the scheduler, `ensure_scheduler_topics`) and
the projector's `<prefix>.events.deadletter` (`events_deadletter_spec`).

Runtime code, not the launcher: the services import this module, and the launcher (devstack/kafka.py) imports
it, never the reverse.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spotreel.platform.errors import InfraError
from spotreel.config.settings import Settings

WEEK_MS = str(7 * 24 * 3600 * 1000)

# Compaction that acts within a minute: the active segment is never cleaned, so segments roll quickly.
COMPACTED = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": "0.01",
    "segment.ms": "60000",
}


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)
    replication: int = 1


def replicated(settings: Settings, specs: list[TopicSpec]) -> list[TopicSpec]:
    """The specs at the settings' replication factor and min.insync.replicas (1 and 1 on the single-node stack;
    3 and 2 in the cluster profile: an acks=all write survives one broker lost, and still succeeds while one is
    down)."""
    return [TopicSpec(s.name, s.partitions, {**s.config, "min.insync.replicas": str(settings.kafka_min_isr)},
                      settings.kafka_rf) for s in specs]


def commands_topic(settings: Settings) -> str:
    return f"{settings.topic_prefix}.commands"


def events_topic(settings: Settings) -> str:
    return f"{settings.topic_prefix}.events"


def replies_topic(settings: Settings) -> str:
    return f"{settings.topic_prefix}.replies"


def worker_leases_topic(settings: Settings) -> str:
    return f"{settings.topic_prefix}.worker-leases"


def tenant_usage_topic(settings: Settings) -> str:
    return f"{settings.topic_prefix}.tenant-usage"


def tenants_topic(settings: Settings) -> str:
    return f"{settings.topic_prefix}.tenants"


def commands_deadletter_topic(settings: Settings) -> str:
    return f"{settings.topic_prefix}.commands.deadletter"


def assignments_topic(settings: Settings) -> str:
    return f"{settings.topic_prefix}.assignments"


def events_deadletter_topic(settings: Settings) -> str:
    """The projector's dead letters: events it could not project (not the scheduler's `commands_deadletter_topic`)."""
    return f"{settings.topic_prefix}.events.deadletter"


def pool_stats_topic(settings: Settings) -> str:
    return f"{settings.topic_prefix}.pool-stats"


def scheduler_app_id(settings: Settings) -> str:
    return f"{settings.topic_prefix}.scheduler"


def changelog_topic(settings: Settings, table: str) -> str:
    return f"{scheduler_app_id(settings)}-{table}-changelog"


def scheduler_tables(settings: Settings) -> list[str]:
    return [t.strip() for t in settings.scheduler_tables.split(",") if t.strip()]


def topic_specs(settings: Settings) -> list[TopicSpec]:
    p = settings.partitions
    specs = [
        # Commands are requests: once the scheduler has turned them into events they are history. The broker
        # stamps each one with its own clock as it appends it (LogAppendTime): a lease holder's command is
        # judged by when it entered the log, not by when the owner got to it, so a scheduler behind a backlog
        # never expires a lease that was renewed in time (services/scheduler/README.md, "Leases under load").
        TopicSpec(commands_topic(settings), p, {"cleanup.policy": "delete", "retention.ms": WEEK_MS,
                                                "message.timestamp.type": "LogAppendTime"}),
        # Events are the system of record: kept forever, whatever the broker default says.
        TopicSpec(events_topic(settings), p,
                  {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}),
        # The scheduler's answers to renewals it did not persist (domain/renewals.py): a lease holder waits
        # seconds for one, nobody reads them later.
        TopicSpec(replies_topic(settings), p, {"cleanup.policy": "delete", "retention.ms": str(3600 * 1000)}),
        # Dead letters wait for a person; they must not expire before someone looks.
        TopicSpec(commands_deadletter_topic(settings), p, {"cleanup.policy": "delete", "retention.ms": "-1"}),
        TopicSpec(pool_stats_topic(settings), p, dict(COMPACTED)),
        # Which lease each worker holds, whichever partition granted it: one job per worker across partitions.
        TopicSpec(worker_leases_topic(settings), p, dict(COMPACTED)),
        # Each partition's usage per tenant, summed by every scheduler instance: fair share across partitions.
        TopicSpec(tenant_usage_topic(settings), p, dict(COMPACTED)),
        # Each tenant's plan (weight, in-flight ceiling, rate, highest priority), read by every scheduler.
        TopicSpec(tenants_topic(settings), p, dict(COMPACTED)),
    ]
    # Co-partitioned with commands: Faust requires a table's changelog to match its source topic.
    specs += [TopicSpec(changelog_topic(settings, t), p, dict(COMPACTED)) for t in scheduler_tables(settings)]
    return replicated(settings, specs)


def scheduler_extra_specs(settings: Settings) -> list[TopicSpec]:
    # Answers to RequestWork; short-lived, a requester that is gone does not need them.
    return replicated(settings, [TopicSpec(assignments_topic(settings), settings.partitions,
                                           {"cleanup.policy": "delete", "retention.ms": str(3600 * 1000)})])


def events_deadletter_spec(settings: Settings) -> TopicSpec:
    # Dead letters wait for a person: they must not expire first.
    return replicated(settings, [TopicSpec(events_deadletter_topic(settings), 1, {"retention.ms": "-1"})])[0]


def admin_client(bootstrap: str, timeout: float):
    from confluent_kafka.admin import AdminClient

    # log_level 0: librdkafka would print every refused connection to stderr while the broker starts.
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0,
                        "socket.timeout.ms": int(max(timeout, 1) * 1000)})


def create_missing(admin, specs: list[TopicSpec], timeout: float = 30.0, existing=None) -> list[str]:
    """Create those of `specs` the broker lacks (at each spec's replication factor); return the names created. A topic
    that another process created meanwhile counts as present. `existing`: a `list_topics().topics` already
    read, to spare a round trip."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    if existing is None:
        existing = admin.list_topics(timeout=timeout).topics
    missing = [s for s in specs if s.name not in existing]
    created = []
    if missing:
        futures = admin.create_topics(
            [NewTopic(s.name, num_partitions=s.partitions, replication_factor=s.replication, config=s.config) for s in missing],
            operation_timeout=timeout, request_timeout=timeout,
        )
        for name, fut in futures.items():
            try:
                fut.result(timeout)
                created.append(name)
            except KafkaException as exc:
                err = exc.args[0]
                if err.code() != KafkaError.TOPIC_ALREADY_EXISTS:  # a concurrent `up` made it first
                    raise InfraError(f"kafka: cannot create topic {name}: {err.str()}") from None
    return created


def ensure_topics(settings: Settings, say=print, timeout: float = 30.0) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = admin_client(settings.kafka_bootstrap, timeout)
    specs = topic_specs(settings)
    existing = admin.list_topics(timeout=timeout).topics
    created = create_missing(admin, specs, timeout, existing)

    for spec in specs:
        if spec.name in existing and len(existing[spec.name].partitions) != spec.partitions:
            raise InfraError(
                f"kafka: topic {spec.name} has {len(existing[spec.name].partitions)} partitions, "
                f"settings say {spec.partitions}",
                ["partition counts never change under a running system (job ownership is by partition);",
                 "use `spotreel infra up --fresh` to start over, or set SPOTREEL_PARTITIONS to match"],
            )

    fixed = []
    present = [s for s in specs if s.name in existing]
    if present:
        described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, s.name) for s in present])
        for resource, fut in described.items():
            spec = next(s for s in present if s.name == resource.name)
            current = {k: v.value for k, v in fut.result(timeout).items()}
            drift = {k: v for k, v in spec.config.items() if current.get(k) != v}
            if drift:
                entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in drift.items()]
                res = ConfigResource(ResourceType.TOPIC, spec.name, incremental_configs=entries)
                for f in admin.incremental_alter_configs([res]).values():
                    f.result(timeout)
                fixed.append(f"{spec.name} ({', '.join(f'{k}={v}' for k, v in drift.items())})")

    # Replication is fixed when a topic is made; raising it is a reassignment an operator plans, not a setting.
    under = [f"{s.name} ({len(next(iter(existing[s.name].partitions.values())).replicas)})" for s in present
             if existing[s.name].partitions
             and len(next(iter(existing[s.name].partitions.values())).replicas) < s.replication]

    parts = [f"{len(specs)} topics present"]
    if under:
        parts.append(f"replication factor below {settings.kafka_rf} (left as is) on {', '.join(under)}")
    if created:
        parts.append(f"created {', '.join(created)}")
    if fixed:
        parts.append(f"configs corrected on {'; '.join(fixed)}")
    say(f"kafka: {'; '.join(parts)}")


def ensure_scheduler_topics(settings: Settings, timeout: float = 30.0) -> None:
    """Declare every topic the scheduler reads or writes (idempotent)."""
    ensure_topics(settings, say=lambda *a, **k: None, timeout=timeout)
    create_missing(admin_client(settings.kafka_bootstrap, timeout), scheduler_extra_specs(settings), timeout)


def delete_topics(settings: Settings, timeout: float = 30.0) -> None:
    """Every topic of the prefix: the declared ones and whatever else is named `<prefix>.*` (the projector's
    dead letters, which it declares itself; before that one was missed here, each simulation run and test left
    its `events.deadletter` behind)."""
    admin = admin_client(settings.kafka_bootstrap, timeout)
    names = {s.name for s in (*topic_specs(settings), *scheduler_extra_specs(settings), events_deadletter_spec(settings))}
    names |= {t for t in admin.list_topics(timeout=timeout).topics if t.startswith(f"{settings.topic_prefix}.")}
    for fut in admin.delete_topics(sorted(names)).values():
        try:
            fut.result(timeout)
        except Exception:
            pass
