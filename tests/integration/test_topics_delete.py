"""`delete_topics` against the real broker: every topic of a prefix goes, the ones a service declares for
itself (the projector's dead letters) included, and nothing of another prefix."""

from __future__ import annotations

import time
from dataclasses import replace

from spotreel.adapters.kafka import delete_topics, ensure_scheduler_topics
from spotreel.platform.topics import admin_client, create_missing, events_deadletter_spec


def _named(admin, prefix: str) -> set[str]:
    return {t for t in admin.list_topics(timeout=10).topics if t.startswith(f"{prefix}.")}


def _until(check, what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)  # the broker's metadata follows the controller a moment later


def test_every_topic_of_the_prefix_is_deleted_and_no_other(settings, unique):
    mine = replace(settings, topic_prefix=f"test.{unique}", partitions=2)
    other = replace(settings, topic_prefix=f"test.{unique}x", partitions=1)
    admin = admin_client(settings.kafka_bootstrap, 30)
    ensure_scheduler_topics(mine)
    ensure_scheduler_topics(other)
    create_missing(admin, [events_deadletter_spec(mine)], 30)  # as the projector declares it at its start
    try:
        wanted = {f"{mine.topic_prefix}.events.deadletter", f"{mine.topic_prefix}.commands"}
        _until(lambda: wanted <= _named(admin, mine.topic_prefix), "the topics were not created")
        kept = _named(admin, other.topic_prefix)
        assert kept
        delete_topics(mine)
        _until(lambda: not _named(admin, mine.topic_prefix), f"left: {_named(admin, mine.topic_prefix)}")
        assert _named(admin, other.topic_prefix) == kept, "a prefix that merely starts the same is not touched"
    finally:
        delete_topics(mine)
        delete_topics(other)
