"""Regression: right after assignment, before any fetch, librdkafka reports position and cached high mark
as OFFSET_INVALID (-1001); added to the lag, that sentinel would make it negative. Against a real topic the lag must be the unread records, and zero once everything is projected."""

from __future__ import annotations

from confluent_kafka import TopicPartition

from spotreel.services.projector.service import build
from tests.integration.projector_kit import interleave, make_histories, produce, projector_lane


def test_lag_before_the_first_fetch_is_the_backlog_not_a_negative_number(stack, settings, make_topic, cql, unique):
    s, topic = projector_lane(settings, unique, cql, make_topic, 2)
    n = produce(stack.kafka_bootstrap, topic, interleave(make_histories(n_jobs=5, events_per_job=6)))

    with build(s, until_idle=True) as projector:
        parts = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        projector.consumer.assign(parts)
        projector._assigned = {(topic, 0), (topic, 1)}  # what the rebalance callback records
        assert [tp.offset for tp in projector.consumer.position(parts)] == [-1001, -1001]
        assert projector.lag() == n
        projector.consumer.unassign()
        projector._assigned = set()
        stats = projector.run()
    assert stats.events + stats.rejections == n
    assert stats.lag == 0
