"""`spotreel infra status` sizes (devstack/sizes.py) against the shared stack's real Kafka and SeaweedFS: a topic's
records and bytes, the objects and bytes of a bucket."""

from __future__ import annotations

from dataclasses import replace

from confluent_kafka import Producer

from spotreel.devstack import sizes


def test_sizes_count_a_topics_records_and_bytes_and_a_buckets_objects(settings, make_topic, s3, bucket, unique):
    name = make_topic("events", partitions=2)
    prod = Producer({"bootstrap.servers": settings.kafka_bootstrap})
    for i in range(10):
        prod.produce(name, value=b"x" * 100, partition=i % 2)
    assert prod.flush(10) == 0
    s3.put_object(Bucket=bucket, Key="videos/a.mp4", Body=b"1" * 1000)
    s3.put_object(Bucket=bucket, Key="checkpoints/j/e1/s1", Body=b"2" * 234)
    mine = replace(settings, topic_prefix=f"test.{unique}", s3_bucket_artifacts=bucket, s3_bucket_checkpoints=bucket)

    got = sizes.collect(mine)
    [topic] = got["topics"]
    assert (topic["topic"], topic["partitions"], topic["records"]) == (name, 2, 10)
    assert topic["bytes"] is not None and topic["bytes"] >= 10 * 100  # the local broker's segment files
    assert got["table"] is None  # no scheduler changelog under this prefix
    assert got["buckets"] == [{"bucket": bucket, "objects": 2, "bytes": 1234}] * 2
    text = "\n".join(sizes.render(got))
    assert f"topic {name}:" in text and "offset span 10 (2 partitions)" in text
    assert f"bucket {bucket}: 2 objects, 1.2 KiB" in text
    # A server that is not healthy is not asked: the status says so instead of waiting for it.
    down = sizes.collect(mine, kafka=False, s3=False)
    assert "kafka is not healthy" in down["topics_error"] and "s3 is not healthy" in down["buckets_error"]
    assert "topics: unavailable" in "\n".join(sizes.render(down))
