"""The janitor (services/janitor) against the real SeaweedFS S3, Kafka and Cassandra: checkpoints deleted
from the events (pruned keys at once, succeeded and cancelled jobs at once, offsets committed), and the
sweep by the read model (failed jobs' checkpoints after the retention, videos per plan)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from confluent_kafka import Consumer, Producer, TopicPartition

from spotreel.codec import Codec
from spotreel.domain import events as ev
from spotreel.platform.migrate import migrate
from spotreel.services.janitor import objects
from spotreel.services.janitor.service import build
from spotreel.services.janitor.sweep import sweep

DAY_MS = 86_400_000


def ck(job: str, step: int) -> str:
    return f"ckpt/{job}/e00000001/s{step:06d}.ckpt"


def keys(s3, bucket: str) -> set[str]:
    return {o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}


def test_janitor_deletes_checkpoints_from_events_and_sweeps_by_the_read_model(settings, unique, make_topic, s3,
                                                                              bucket, cql):
    migrate(cql, unique, say=lambda *_: None)
    topic = make_topic("events")
    mine = replace(settings, topic_prefix=f"test.{unique}", cassandra_keyspace=unique,
                   s3_bucket_checkpoints=bucket, s3_bucket_artifacts=bucket, scheduler_retention_s=86_400)
    run, ok, cxl, fail = "jrun", "jok", "jcxl", "jfail"
    written = [ck(run, 1), ck(run, 2), ck(run, 3), ck(ok, 1), ck(ok, 2), ck(cxl, 1), ck(fail, 1),
               "videos/vfree/e00000001/video.mp4", "videos/vpro/e00000001/video.mp4"]
    for key in written:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    now = int(time.time() * 1000)
    # The read model knows only the failed job and the two videos' jobs: the event path needs no read model.
    cql.execute("INSERT INTO tenants (tenant_id, plan) VALUES ('tfree', 'free')")
    cql.execute("INSERT INTO tenants (tenant_id, plan) VALUES ('tpro', 'pro')")
    for job, tenant, status in ((fail, "tfree", "failed"), ("vfree", "tfree", "succeeded"),
                                ("vpro", "tpro", "succeeded")):
        cql.execute("INSERT INTO jobs_by_id (job_id, tenant_id, status, updated_at) VALUES (%s, %s, %s, %s)",
                    (job, tenant, status, now))

    codec, prod = Codec.default(), Producer({"bootstrap.servers": settings.kafka_bootstrap})
    for e in (
        ev.CheckpointRecorded(job_id=run, version=4, at_ms=now, causation_id="c", epoch=1, checkpoint_key=ck(run, 3),
                              step=3, progress_pct=30.0, checksum="s", size_bytes=1, pruned_keys=(ck(run, 1),)),
        ev.JobSucceeded(job_id=ok, version=9, at_ms=now, causation_id="c", epoch=1, artifact_key="videos/jok/v",
                        artifact_checksum="s", artifact_size_bytes=1),
        ev.JobCancelled(job_id=cxl, version=5, at_ms=now, causation_id="c", reason="user"),
        ev.JobFailed(job_id=fail, version=6, at_ms=now, causation_id="c", reason="boom", error_code="render"),
    ):
        prod.produce(topic, key=e.job_id.encode(), value=codec.encode_message(e))
    assert prod.flush(10) == 0

    janitor = build(mine, cql, s3=s3)
    stop = asyncio.Event()
    expect = set(written) - {ck(run, 1), ck(ok, 1), ck(ok, 2), ck(cxl, 1)}

    async def until_clean() -> None:
        task = asyncio.create_task(janitor.run(stop))
        deadline = time.monotonic() + 15
        while keys(s3, bucket) != expect and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        stop.set()
        await task

    asyncio.run(until_clean())
    # The running job keeps its newest checkpoints, the failed job all of its own (a retry may resume
    # from them), and the first sweep (real clock) expired no video of today.
    assert keys(s3, bucket) == expect
    check = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"{mine.topic_prefix}.janitor"})
    try:
        [done] = check.committed([TopicPartition(topic, 0)], timeout=10)
        assert done.offset == 4  # committed past every record, after their deletions
    finally:
        check.close()

    from spotreel.services.janitor.service import ReadModelFacts
    facts = ReadModelFacts(cql)

    def sweep_at(t: int):
        return sweep(s3, bucket, bucket, facts.job, facts.plan_of, mine.scheduler_retention_s, t)

    # Inside the retry window nothing of the failed job goes; a free plan's video goes after 7 days.
    assert sweep_at(now + DAY_MS - 1).objects_deleted == 0
    got = sweep_at(now + 7 * DAY_MS)
    assert (got.checkpoint_jobs_cleared, got.videos_expired) == (1, 1)
    assert keys(s3, bucket) == {ck(run, 2), ck(run, 3), "videos/vpro/e00000001/video.mp4"}
    again = sweep_at(now + 7 * DAY_MS)  # idempotent: nothing left to do
    # Only prefixes that still hold objects are looked up (SeaweedFS lists emptied directories for good).
    assert (again.objects_deleted, again.jobs_seen) == (0, 2)
    assert sweep_at(now + 30 * DAY_MS).videos_expired == 1  # the pro plan's 30 days
    # A repeat after a crash deletes keys that are already gone: S3 answers that with success.
    assert objects.delete_keys(s3, bucket, [ck(ok, 1), ck(run, 1)]) == 2
