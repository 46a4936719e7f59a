"""The projector's own consumer (real Kafka, real Cassandra) writes the schedule tables from schedule
events interleaved with job events: the gateway's read API then sees the schedule and its occurrences, and
the jobs' tables are still their fold."""

from __future__ import annotations

from confluent_kafka import Producer

from spotreel.codec import Codec
from spotreel.domain import commands as c
from spotreel.domain import ids
from spotreel.readmodel.schedules import ScheduleReads
from spotreel.services.projector.service import build
from tests.integration.projector_kit import (assert_tables_are_the_fold, interleave, make_histories, produce,
                                             projector_lane)
from tests.unit.test_job_schedules import HOUR, MIN, T, Sched


def test_schedule_events_reach_the_schedule_tables(stack, settings, make_topic, cql, unique):
    s, topic = projector_lane(settings, unique, cql, make_topic, 2)
    sched = Sched(overlap_policy="skip", missed_policy="run_all", timezone="Asia/Tokyo")
    sched.fire(T + HOUR)
    sched.fire(T + 2 * HOUR)  # skipped: the first still runs
    sched.send(c.EndOccurrence("e", "nightly", T + HOUR, "succeeded"), T + 2 * HOUR + MIN)
    sched.send(c.PauseSchedule("p", "nightly"), T + 2 * HOUR + 2 * MIN)
    sched.send(c.PauseSchedule("p2", "nightly"), T + 2 * HOUR + 3 * MIN)  # refused, not in history
    histories = make_histories(n_jobs=5, events_per_job=8)
    produce(stack.kafka_bootstrap, topic, interleave(histories))
    # The scheduler's key for schedule events is the schedule id (one partition, in order).
    producer, codec = Producer({"bootstrap.servers": stack.kafka_bootstrap, "enable.idempotence": True}), Codec.default()
    for event in sched.history:
        producer.produce(topic, key=b"nightly", value=codec.encode_message(event))
    assert producer.flush(30) == 0

    with build(s, until_idle=True, batch_size=50) as projector:
        stats = projector.run()
    assert stats.dead_lettered == 0
    assert_tables_are_the_fold(cql, unique, histories)

    reads = ScheduleReads(cql)
    view = reads.get_schedule("nightly")
    assert view is not None
    assert (view.tenant_id, view.status, view.timezone, view.overlap_policy, view.version) == (
        "acme", "paused", "Asia/Tokyo", "skip", sched.state.version)
    assert [s.schedule_id for s in reads.list_schedules("acme", 10, None).items] == ["nightly"]
    occurrences = reads.occurrences("nightly", 10, None).items
    assert [(o.occurrence_at_ms, o.status, o.reason) for o in occurrences] == [
        (T + 2 * HOUR, "skipped", "overlap"), (T + HOUR, "succeeded", None)]
    assert occurrences[1].job_id == ids.job_id_for_occurrence("acme", "nightly", T + HOUR)
