"""Domain events, Avro-encoded by the codec, through the real Kafka and a consumer group of two members."""

from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer

from spotreel.codec import Codec
from spotreel.domain import commands as c
from spotreel.domain import ids
from tests.unit.jobkit import Driver, submit


def _histories(n_jobs: int) -> list:
    """Realistic event histories: each job submitted, leased, progressed, checkpointed, completed."""
    events = []
    for i in range(n_jobs):
        d = Driver()
        d.send(submit(key=f"k{i}"))
        (leased,) = d.grant()
        epoch = leased.epoch
        d.send(c.ReportProgress(d.next_id(), d.job_id, epoch, "w1", 4, 20.0), advance=1_000)
        d.send(c.RecordCheckpoint(d.next_id(), d.job_id, epoch, "w1", ids.checkpoint_key(d.job_id, epoch, 5),
                                  5, 25.0, "sha256:abc", 1234), advance=1_000)
        d.send(c.CompleteJob(d.next_id(), d.job_id, epoch, "w1", ids.artifact_key(d.job_id, epoch),
                             "sha256:def", 99_000), advance=1_000)
        events.extend(d.history)
    return events


def test_avro_events_through_a_consumer_group(stack, make_topic):
    codec = Codec.default()
    topic = make_topic("events", partitions=3)
    sent = _histories(12)
    assert len({type(e).__name__ for e in sent}) >= 6

    producer = Producer({"bootstrap.servers": stack.kafka_bootstrap, "enable.idempotence": True})
    for event in sent:
        producer.produce(topic, key=event.job_id.encode(), value=codec.encode_message(event))
    assert producer.flush(15) == 0

    group = f"group-{uuid.uuid4().hex[:8]}"
    received: dict[str, list] = {"a": [], "b": []}
    errors: list[Exception] = []

    def member(name: str) -> None:
        consumer = Consumer({"bootstrap.servers": stack.kafka_bootstrap, "group.id": group,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline and sum(map(len, received.values())) < len(sent):
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    raise KafkaException(msg.error())
                received[name].append((msg.partition(), codec.decode_message(msg.value())))
                consumer.commit(msg, asynchronous=False)
        except Exception as exc:  # surfaced to the test thread below
            errors.append(exc)
        finally:
            consumer.close()

    threads = [threading.Thread(target=member, args=(n,)) for n in received]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not errors, errors

    got = [e for rows in received.values() for _, e in rows]
    assert sorted(got, key=repr) == sorted(sent, key=repr), "events lost, duplicated or altered in transit"
    # Keyed by job id: each job's events stay on one partition, in the order they were produced.
    by_job: dict[str, list] = {}
    partitions_of: dict[str, set[int]] = {}
    for rows in received.values():
        for part, e in rows:
            by_job.setdefault(e.job_id, []).append(e)
            partitions_of.setdefault(e.job_id, set()).add(part)
    assert all(len(p) == 1 for p in partitions_of.values())
    for job_id, evs in by_job.items():
        assert [e.version for e in evs] == [e.version for e in sent if e.job_id == job_id]
    used = {p for ps in partitions_of.values() for p in ps}
    assert len(used) >= 2, "12 keys over 3 partitions should use more than one"
