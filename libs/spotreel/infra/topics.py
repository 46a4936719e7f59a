"""The Kafka topics spotreel relies on, declared idempotently (created if missing, configs enforced).

Names: `<prefix>.commands`, `<prefix>.events`, `<prefix>.replies`, `<prefix>.commands.deadletter`,
`<prefix>.pool-stats`, `<prefix>.worker-leases`, `<prefix>.tenant-usage`, `<prefix>.tenants`, and
for each scheduler table `<prefix>.scheduler-<table>-changelog`. The changelog name is what Faust itself
derives (`{app.id}-{table}-changelog`) when the scheduler's app id is `scheduler_app_id(settings)`, so
the topic declared here and the one Faust expects are the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spotreel.infra.errors import InfraError
from spotreel.settings import Settings

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


def deadletter_topic(settings: Settings) -> str:
    return f"{settings.topic_prefix}.commands.deadletter"


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
        TopicSpec(deadletter_topic(settings), p, {"cleanup.policy": "delete", "retention.ms": "-1"}),
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
    return specs


def ensure_topics(settings: Settings, say=print, timeout: float = 30.0) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                       ResourceType)

    from spotreel.infra.kafka import admin_client

    admin = admin_client(settings.kafka_bootstrap, timeout)
    specs = topic_specs(settings)
    existing = admin.list_topics(timeout=timeout).topics
    missing = [s for s in specs if s.name not in existing]
    created = []
    if missing:
        futures = admin.create_topics(
            [NewTopic(s.name, num_partitions=s.partitions, replication_factor=1, config=s.config) for s in missing],
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

    parts = [f"{len(specs)} topics present"]
    if created:
        parts.append(f"created {', '.join(created)}")
    if fixed:
        parts.append(f"configs corrected on {'; '.join(fixed)}")
    say(f"kafka: {'; '.join(parts)}")
