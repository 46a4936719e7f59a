"""The projector through Cassandra outages, against real Kafka and Cassandra (the store refuses for a while):

- a batch that waits on Cassandra for longer than the group lets a member go without polling is dropped
  from the group, and its commit fails. That must cost a redelivery, not the process: the rows are written,
  and the records come again and project to the same rows;
- a projector (re)started during an outage meets jobs mid-history and must read their histories back from
  Cassandra: that read waits for Cassandra like the writes do.

Both happen in the whole-system chaos test; here each is reproduced alone."""

from __future__ import annotations

import time

from spotreel.codec import Codec
from spotreel.platform.topics import events_topic
from spotreel.services.projector.consumer import Projector, ProjectorConfig
from spotreel.services.projector.service import events_deadletter_topic
from spotreel.services.projector.store import Store
from tests.integration.projector_kit import (assert_tables_are_the_fold, interleave, make_histories, produce,
                                             projector_lane)

# The broker's least session timeout (group.min.session.timeout.ms, 6 s by default), and librdkafka wants
# max.poll.interval.ms >= session.timeout.ms: a batch stuck for OUTAGE_S outlives the poll interval.
SESSION_TIMEOUT_MS = 6_000
POLL_INTERVAL_MS = 6_000
OUTAGE_S = 10.0


class CassandraGoesAway(Store):
    """The real store, except that from its first use on it is unreachable for `outage_s` seconds."""

    def __init__(self, session, outage_s: float) -> None:
        super().__init__(session)
        self.outage_s = outage_s
        self.back_at: float | None = None
        self.refused: dict[str, int] = {"write": 0, "histories": 0}

    def _away(self, what: str) -> None:
        if self.back_at is None:
            self.back_at = time.monotonic() + self.outage_s
        if time.monotonic() < self.back_at:
            self.refused[what] += 1
            raise ConnectionError("no host available")

    def submit(self, ops):  # write() goes through submit() too
        self._away("write")
        return super().submit(ops)

    def histories(self, wanted):
        self._away("histories")
        return super().histories(wanted)


def _config(s, stack, unique: str, **kw) -> ProjectorConfig:
    return ProjectorConfig(bootstrap=stack.kafka_bootstrap, group_id=f"{unique}.projector", events_topic=events_topic(s),
                           events_deadletter_topic=events_deadletter_topic(s), until_idle=True, **kw)


def test_a_batch_stuck_past_the_poll_interval_is_projected_after_the_group_dropped_it(
        stack, settings, make_topic, cql, unique):
    s, topic = projector_lane(settings, unique, cql, make_topic, 2)
    histories = make_histories(n_jobs=12, events_per_job=10, seed=5)
    produce(stack.kafka_bootstrap, topic, interleave(histories))

    store = CassandraGoesAway(cql, OUTAGE_S)
    stats = Projector(_config(s, stack, unique, max_poll_interval_ms=POLL_INTERVAL_MS,
                                     session_timeout_ms=SESSION_TIMEOUT_MS), store, Codec.default()).run()
    assert store.refused["write"] > 0 and stats.commit_failures >= 1, (store.refused, stats)
    assert_tables_are_the_fold(cql, unique, histories)


def test_a_projector_restarted_during_an_outage_reads_histories_back_once_cassandra_is_back(
        stack, settings, make_topic, cql, unique):
    s, _ = projector_lane(settings, unique, cql, make_topic, 2)
    histories = make_histories(n_jobs=12, events_per_job=10, seed=6)
    half = [h[:len(h) // 2] for h in histories]
    produce(stack.kafka_bootstrap, events_topic(s), interleave(half))
    Projector(_config(s, stack, unique), Store(cql), Codec.default()).run()

    produce(stack.kafka_bootstrap, events_topic(s), interleave([h[len(h) // 2:] for h in histories]))
    store = CassandraGoesAway(cql, 5.0)
    stats = Projector(_config(s, stack, unique), store, Codec.default()).run()
    assert store.refused["histories"] > 0 and stats.replayed_histories > 0, (store.refused, stats)
    assert_tables_are_the_fold(cql, unique, histories)
