"""Projection throughput: events/s through the projector into Cassandra, next to a bare confluent-kafka
consume loop over the same records in the same run. Uses a throwaway topic prefix and keyspace.

    .venv/bin/python -m bench.projector_throughput [n_jobs] [events_per_job]
"""

from __future__ import annotations

import sys
import time
import uuid
from dataclasses import replace

from cassandra.cluster import Cluster
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from spotreel.infra.migrate import migrate
from spotreel.services.projector.service import build, deadletter_topic
from spotreel.settings import Settings
from tests.integration.projector_kit import interleave, make_histories, produce


def bare_loop(bootstrap: str, topic: str, total: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}.bare", "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    c.subscribe([topic])
    seen, first = 0, None
    while seen < total:
        msgs = c.consume(2000, 0.2)
        if msgs and first is None:
            first = time.perf_counter()
        seen += sum(1 for m in msgs if m.error() is None)
    elapsed = time.perf_counter() - first
    c.close()
    return elapsed


def main(n_jobs: int = 800, per_job: int = 25) -> None:
    base = Settings.from_env()
    tag = "b" + uuid.uuid4().hex[:10]
    s = replace(base, topic_prefix=f"bench.{tag}", cassandra_keyspace=tag)
    topic = f"{s.topic_prefix}.events"
    admin = AdminClient({"bootstrap.servers": s.kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1), NewTopic(deadletter_topic(s), 1, 1)])[topic].result(30)
    cluster = Cluster([s.host], port=s.cassandra_port, protocol_version=5)
    session = cluster.connect()
    try:
        migrate(session, tag, say=lambda *_: None)
        stream = interleave(make_histories(n_jobs, per_job))
        total = produce(s.kafka_bootstrap, topic, stream)
        bare = bare_loop(s.kafka_bootstrap, topic, total)
        with build(s, until_idle=True) as projector:
            first: list[float] = []
            batch = projector._batch

            def timed(msgs, stop):
                if not first:
                    first.append(time.perf_counter())
                batch(msgs, stop)

            projector._batch = timed
            stats = projector.run()
            elapsed = time.perf_counter() - first[0]
        print(f"{total} events ({n_jobs} jobs), {stats.writes} Cassandra writes after coalescing")
        print(f"bare consume loop : {total / bare:10.0f} events/s ({bare:.2f} s)")
        print(f"projector         : {total / elapsed:10.0f} events/s ({elapsed:.2f} s), "
              f"{100 * bare / elapsed:.1f}% of the bare loop")
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {tag}")
        cluster.shutdown()
        for f in admin.delete_topics([topic, deadletter_topic(s)]).values():
            try:
                f.result(30)
            except Exception:
                pass


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
