"""Settings (+ the Cassandra session of the process it runs in) → a ready Janitor with its sweep.

The janitor runs inside `spotreel webhooks` (services/webhooks/cli.py): that process already follows the
events topic and holds a Cassandra session, and the janitor's work is as light as the notifier's. Its
own consumer group (`<prefix>.janitor`) keeps its offsets apart from the notifier's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime, timezone
from functools import partial

from spotreel.config import knobs
from spotreel.services.janitor.janitor import ENV_PREFIX, NOT_FROM_ENV, Janitor, JanitorConfig
from spotreel.services.janitor.sweep import JobFacts, sweep
from spotreel.config.settings import Settings


def group_id(settings: Settings) -> str:
    return f"{settings.topic_prefix}.janitor"


class ReadModelFacts:
    """The sweep's two questions, answered by the projector's tables and the tenants table."""

    def __init__(self, session) -> None:
        self.session = session
        self._job = session.prepare("SELECT status, updated_at, tenant_id FROM jobs_by_id WHERE job_id = ?")
        self._plan = session.prepare("SELECT plan FROM tenants WHERE tenant_id = ?")

    def job(self, job_id: str) -> JobFacts | None:
        row = self.session.execute(self._job, (job_id,)).one()
        if row is None or row.status is None:
            return None
        return JobFacts(row.status, _ms(row.updated_at), row.tenant_id)

    def plan_of(self, tenant_id: str) -> str | None:
        row = self.session.execute(self._plan, (tenant_id,)).one()
        return None if row is None else row.plan


def _ms(value: datetime | None) -> int | None:
    if value is None:
        return None
    aware = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
    return int(aware.timestamp() * 1000)


def build(settings: Settings, session, s3=None, env: Mapping[str, str] | None = None) -> Janitor:
    """`env`: where the tuning knobs (SPOTREEL_JANITOR_<NAME>) are read; the process's environment by default."""
    from spotreel.platform.s3 import s3_client
    from spotreel.platform.topics import events_topic

    # A bulk delete (1,000 keys) is answered only once every key is gone, so its answer may take longer than a
    # worker's; the janitor holds nothing up while it waits, and retries what failed (janitor.py).
    s3 = s3 or s3_client(settings, timeout=30.0)
    facts = ReadModelFacts(session)
    config = JanitorConfig(bootstrap=settings.kafka_bootstrap, group_id=group_id(settings),
                           events_topic=events_topic(settings), checkpoint_bucket=settings.s3_bucket_checkpoints,
                           artifact_bucket=settings.s3_bucket_artifacts,
                           sweep_every_s=float(settings.janitor_sweep_every_s),
                           **knobs.dataclass_overrides(JanitorConfig, ENV_PREFIX,
                                                       os.environ if env is None else env, NOT_FROM_ENV))
    run_sweep = partial(sweep, s3, settings.s3_bucket_checkpoints, settings.s3_bucket_artifacts, facts.job,
                        facts.plan_of, settings.scheduler_retention_s)
    return Janitor(config, s3, sweep=lambda now_ms, stopping: run_sweep(now_ms, stopping=stopping))
