"""The topics `infra up` declares: names from the prefix, partitions from settings, retention rules."""

from __future__ import annotations

import pytest

from spotreel.platform.topics import changelog_topic, scheduler_app_id, topic_specs
from spotreel.config.settings import Settings

pytestmark = pytest.mark.unit


def test_names_partitions_and_configs():
    s = Settings(topic_prefix="acme", partitions=3, scheduler_tables="jobs, timers")
    specs = {t.name: t for t in topic_specs(s)}
    assert set(specs) == {"acme.commands", "acme.events", "acme.replies", "acme.commands.deadletter",
                          "acme.pool-stats", "acme.worker-leases", "acme.tenant-usage", "acme.tenants",
                          "acme.scheduler-jobs-changelog", "acme.scheduler-timers-changelog"}
    assert {t.partitions for t in specs.values()} == {3}
    assert specs["acme.events"].config["retention.ms"] == "-1"
    assert specs["acme.events"].config["cleanup.policy"] == "delete"
    assert specs["acme.commands.deadletter"].config["retention.ms"] == "-1"
    assert specs["acme.replies"].config["retention.ms"] == str(3600 * 1000)  # answers, not history
    for compacted in ("acme.pool-stats", "acme.worker-leases", "acme.tenant-usage", "acme.tenants",
                      "acme.scheduler-jobs-changelog"):
        assert specs[compacted].config["cleanup.policy"] == "compact"


def test_changelog_name_is_what_faust_derives_from_the_app_id():
    s = Settings()
    # Faust names a table's changelog f"{app.conf.id}-{table.name}-changelog".
    assert changelog_topic(s, "jobs") == f"{scheduler_app_id(s)}-jobs-changelog"
