"""A projector whose batch waits on Cassandra for longer than the group lets a member go without polling
is dropped from the group; its commit then fails. That must cost a redelivery, not the process: the rows are
written, and the records come again and project to the same rows."""

from __future__ import annotations

import time

from spotreel.codec import Codec
from spotreel.infra.topics import events_topic
from spotreel.services.projector.consumer import Projector, ProjectorConfig
from spotreel.services.projector.service import deadletter_topic
from spotreel.services.projector.store import Store
from tests.integration.projector_kit import (assert_tables_are_the_fold, interleave, isolated, make_histories,
                                             prepare_keyspace, produce)

POLL_INTERVAL_MS = 10_000  # the least librdkafka allows with the projector's 10 s session timeout
OUTAGE_S = 16.0


class CassandraGoesAway(Store):
    """The real store, except that from the first batch on it is unreachable for OUTAGE_S seconds."""

    back_at: float | None = None
    refused = 0

    def write(self, ops):
        if self.back_at is None:
            self.back_at = time.monotonic() + OUTAGE_S
        if time.monotonic() < self.back_at:
            self.refused += 1
            raise ConnectionError("no host available")
        return super().write(ops)


def test_a_batch_stuck_past_the_poll_interval_is_projected_after_the_group_dropped_it(
        stack, settings, make_topic, cql, unique):
    s = isolated(settings, unique)
    prepare_keyspace(cql, unique)
    topic = make_topic("events", partitions=2)
    make_topic("events.deadletter")
    assert topic == events_topic(s)
    histories = make_histories(n_jobs=12, events_per_job=10, seed=5)
    produce(stack.kafka_bootstrap, topic, interleave(histories))

    store = CassandraGoesAway(cql)
    config = ProjectorConfig(bootstrap=stack.kafka_bootstrap, group_id=f"{unique}.projector", events_topic=topic,
                             deadletter_topic=deadletter_topic(s), until_idle=True,
                             max_poll_interval_ms=POLL_INTERVAL_MS)
    stats = Projector(config, store, Codec.default()).run()
    assert store.refused > 0 and stats.commit_failures >= 1, (store.refused, stats)
    assert_tables_are_the_fold(cql, unique, histories)
