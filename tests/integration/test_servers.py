"""The real servers behave the way spotreel relies on: compaction, transactions, LWT, conditional puts."""

from __future__ import annotations

import time
import uuid

import pytest
from botocore.exceptions import ClientError
from confluent_kafka import Consumer, KafkaException, Producer


def _consume_all(bootstrap: str, topic: str, *, isolation: str = "read_uncommitted", idle_s: float = 3.0):
    """Read a topic from the beginning until it stays idle; returns (key, value) pairs."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.subscribe([topic])
    out = []
    last = time.monotonic()
    try:
        while time.monotonic() - last < idle_s:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            out.append((msg.key(), msg.value()))
            last = time.monotonic()
    finally:
        consumer.close()
    return out


def test_compacted_topic_really_compacts(stack, make_topic):
    topic = make_topic(
        "compact",
        config={
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "100",
            "min.compaction.lag.ms": "0",
        },
    )
    producer = Producer({"bootstrap.servers": stack.kafka_bootstrap, "enable.idempotence": True})
    for version in range(50):
        producer.produce(topic, key=b"job-1", value=f"v{version}".encode())
        producer.produce(topic, key=b"job-2", value=f"w{version}".encode())
    producer.flush(10)

    # The cleaner only touches closed segments: keep rolling the active one with fresh writes
    # under an unrelated key until the old values of job-1/job-2 are gone.
    deadline = time.monotonic() + 90
    records = []
    while time.monotonic() < deadline:
        time.sleep(2)
        producer.produce(topic, key=b"roll", value=b"x")
        producer.flush(10)
        records = _consume_all(stack.kafka_bootstrap, topic, idle_s=1.5)
        job1 = [v for k, v in records if k == b"job-1"]
        if job1 == [b"v49"]:
            break
    job1 = [v for k, v in records if k == b"job-1"]
    job2 = [v for k, v in records if k == b"job-2"]
    assert job1 == [b"v49"], f"old values of job-1 still present after compaction: {len(job1)} left"
    assert job2 == [b"w49"]


def test_transaction_visible_to_read_committed_only_after_commit(stack, make_topic):
    topic = make_topic("txn")
    producer = Producer(
        {"bootstrap.servers": stack.kafka_bootstrap, "transactional.id": f"txn-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, key=b"k", value=f"pending-{i}".encode())
    producer.flush(10)

    assert _consume_all(stack.kafka_bootstrap, topic, isolation="read_committed", idle_s=2.0) == []
    producer.commit_transaction(30)
    seen = _consume_all(stack.kafka_bootstrap, topic, isolation="read_committed", idle_s=2.0)
    assert [v for _, v in seen] == [f"pending-{i}".encode() for i in range(5)]

    # An aborted transaction never becomes visible to read_committed readers.
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"aborted")
    producer.flush(10)
    producer.abort_transaction(30)
    seen = _consume_all(stack.kafka_bootstrap, topic, isolation="read_committed", idle_s=2.0)
    assert b"aborted" not in [v for _, v in seen]
    assert len(seen) == 5


def test_cassandra_write_read_and_lightweight_transaction(cql):
    cql.execute("CREATE TABLE leases (job_id text PRIMARY KEY, epoch bigint, worker text)")
    first = cql.execute(
        "INSERT INTO leases (job_id, epoch, worker) VALUES (%s, %s, %s) IF NOT EXISTS", ("j1", 1, "w1")
    ).one()
    assert first.applied is True
    second = cql.execute(
        "INSERT INTO leases (job_id, epoch, worker) VALUES (%s, %s, %s) IF NOT EXISTS", ("j1", 1, "w2")
    ).one()
    assert second.applied is False
    assert second.worker == "w1"

    stale = cql.execute("UPDATE leases SET epoch = 3, worker = 'w3' WHERE job_id = 'j1' IF epoch = 2").one()
    assert stale.applied is False
    fresh = cql.execute("UPDATE leases SET epoch = 2, worker = 'w2' WHERE job_id = 'j1' IF epoch = 1").one()
    assert fresh.applied is True
    row = cql.execute("SELECT epoch, worker FROM leases WHERE job_id = 'j1'").one()
    assert (row.epoch, row.worker) == (2, "w2")


def test_s3_put_get_and_conditional_put_refused_on_existing_key(s3, bucket):
    s3.put_object(Bucket=bucket, Key="videos/j1/e1/out.mp4", Body=b"first")
    assert s3.get_object(Bucket=bucket, Key="videos/j1/e1/out.mp4")["Body"].read() == b"first"

    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket=bucket, Key="videos/j1/e1/out.mp4", Body=b"second", IfNoneMatch="*")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert s3.get_object(Bucket=bucket, Key="videos/j1/e1/out.mp4")["Body"].read() == b"first"

    s3.put_object(Bucket=bucket, Key="videos/j1/e2/out.mp4", Body=b"new", IfNoneMatch="*")
    assert s3.get_object(Bucket=bucket, Key="videos/j1/e2/out.mp4")["Body"].read() == b"new"
