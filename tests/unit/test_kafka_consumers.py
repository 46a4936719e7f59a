"""The consumer factory: the settings each named option stands for, and what no caller gets unasked."""

from __future__ import annotations

import pytest

from spotreel.platform.consumers import GROUP_MEMBER, batched_fetch, consumer_config, private_group
from spotreel.config.settings import Settings

pytestmark = pytest.mark.unit


def test_a_plain_consumer_names_its_group_and_never_commits_on_its_own() -> None:
    assert consumer_config("k:1", "g") == {"bootstrap.servers": "k:1", "group.id": "g", "enable.auto.commit": False}


def test_each_option_is_the_librdkafka_setting_it_names() -> None:
    conf = consumer_config("k:1", "g", read_committed=True, fetch_wait_ms=100, quiet=True, extra=GROUP_MEMBER)
    assert conf == {"bootstrap.servers": "k:1", "group.id": "g", "enable.auto.commit": False,
                    "isolation.level": "read_committed", **batched_fetch(100), "log_level": 3,
                    "auto.offset.reset": "earliest", "session.timeout.ms": 10000, "heartbeat.interval.ms": 2000}


def test_an_extra_setting_wins_over_an_option() -> None:
    assert consumer_config("k:1", "g", fetch_wait_ms=100, extra={"fetch.wait.max.ms": 7})["fetch.wait.max.ms"] == 7


def test_a_private_group_is_this_process_alone_under_the_prefix() -> None:
    settings = Settings.from_env()
    a, b = private_group(settings, "view"), private_group(settings, "view")
    assert a != b
    assert a.startswith(f"{settings.topic_prefix}.view.") and b.startswith(f"{settings.topic_prefix}.view.")
