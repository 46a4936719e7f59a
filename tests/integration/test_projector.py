"""The projector against real Kafka and Cassandra: tables equal the fold of the events, a rebuild from
offset 0 changes no row, and an undecodable record is dead-lettered while the rest is projected."""

from __future__ import annotations

import asyncio

from confluent_kafka import Consumer

from spotreel.domain.evolve import fold
from spotreel.readmodel.jobs import ReadModels
from spotreel.services.gateway.cassandra_store import CassandraReads
from spotreel.services.projector.service import build, events_deadletter_topic
from tests.integration.projector_kit import (assert_tables_are_the_fold, dump, interleave, make_histories, produce,
                                             projector_lane)


def _dead_letters(bootstrap: str, topic: str, expect: int) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}.check", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = []
    for _ in range(60):
        got += [m for m in c.consume(100, 0.5) if m.error() is None]
        if len(got) >= expect:
            break
    c.close()
    return got


def test_tables_are_the_fold_rebuild_changes_nothing_and_garbage_is_dead_lettered(
        stack, settings, make_topic, cql, unique):
    s, topic = projector_lane(settings, unique, cql, make_topic, 3)
    histories = make_histories(n_jobs=40, events_per_job=20)
    stream = interleave(histories)
    produce(stack.kafka_bootstrap, topic, stream, garbage_at=(len(stream) // 2,))

    with build(s, until_idle=True, batch_size=300) as projector:
        stats = projector.run()
    assert stats.dead_lettered == 1
    assert stats.events + stats.rejections == len(stream)
    assert_tables_are_the_fold(cql, unique, histories)
    first = dump(cql, unique)

    (dead,) = _dead_letters(stack.kafka_bootstrap, events_deadletter_topic(s), 1)
    assert dead.value() == b"\x00not avro at all"
    assert dict(dead.headers())["error"] == b"bad_marker"

    # The whole topic again, into the same tables (no truncate): nothing may change.
    with build(s, rebuild=True, until_idle=True, batch_size=300) as projector:
        again = projector.run()
    assert again.events + again.rejections == len(stream)
    assert dump(cql, unique) == first

    # And the read API sees the same jobs.
    reads = ReadModels(cql)
    h = histories[0]
    job = reads.get_job(h[0].job_id)
    assert job is not None and job.version == max(e.version for e in h)
    history = reads.job_events(h[0].job_id)
    assert [e.version for e in history if not e.rejected] == sorted(
        e.version for e in h if type(e).__name__ != "CommandRejected")
    assert len(history) == len(h)
    assert {a.lease_epoch for a in reads.job_attempts(h[0].job_id)} == {
        e.epoch for e in h if type(e).__name__ == "JobLeased"}
    tenant = h[0].tenant if hasattr(h[0], "tenant") else "tenant-0"
    page1 = reads.list_jobs(tenant, limit=5)
    page2 = reads.list_jobs(tenant, limit=5, page_state=page1.page_state)
    listed = page1.items + page2.items
    assert len(listed) == 10 and len({j.job_id for j in listed}) == 10
    created = [j.created_at_ms for j in listed]
    assert created == sorted(created, reverse=True)
    queued = reads.list_jobs(tenant, status="succeeded", limit=100).items
    assert all(j.status == "succeeded" for j in queued)
    # The gateway's in-flight guard counts a tenant's live jobs from tenant_live_jobs, not its whole history.
    gateway_reads = CassandraReads(cql)
    for t in {fold(h).tenant for h in histories}:
        unfinished = sum(1 for h in histories if fold(h).tenant == t and not fold(h).is_terminal)
        assert asyncio.run(gateway_reads.unfinished_jobs(t)) == unfinished
