"""How big the stack's state is, for `spotreel infra status`: each topic of the prefix (offset span and bytes on
the local broker's disk), the scheduler's job table (its compacted changelog) and each bucket (objects, bytes).

State that is meant to stay bounded (the job table, its changelog: services/scheduler/README.md "Bounded state")
is watched here rather than assumed. Offsets span = high - low watermark summed over partitions: the records
a topic holds, except that a compacted topic's span still counts the records compaction removed between them,
so bytes are the measure of a compacted topic. Bytes are the segment files' (the records, not the
preallocated indexes) in the local broker's log directory, and None for a broker elsewhere. Each part fails on its own ("error") without failing the status.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spotreel.devstack.layout import Layout
from spotreel.platform.topics import changelog_topic
from spotreel.config.settings import Settings


def _dir_bytes(path: Path) -> int:
    """The records' bytes: the segment files (*.log), not the indexes Kafka preallocates (10 MiB each)."""
    return sum(f.stat().st_size for f in path.glob("*.log") if f.is_file())


def topic_sizes(settings: Settings, timeout: float = 3.0) -> list[dict[str, Any]]:
    from confluent_kafka import TopicPartition

    from spotreel.platform.consumers import consumer as kafka_consumer

    from spotreel.platform.topics import admin_client

    meta = admin_client(settings.kafka_bootstrap, timeout).list_topics(timeout=timeout)
    # The cluster profile: broker 1's replica (each of three brokers holds every partition at RF 3).
    kraft = Layout.of(settings).data("kafka" if settings.cluster_nodes <= 1 else "kafka-1") / "kraft"
    names = sorted(t for t in meta.topics if t.startswith(settings.topic_prefix + "."))
    consumer = kafka_consumer(settings.kafka_bootstrap, "spotreel-infra-status")
    out = []
    try:
        for name in names:
            span, size = 0, 0
            for p in meta.topics[name].partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(name, p), timeout=timeout)
                span += max(0, high - low)
                log_dir = kraft / f"{name}-{p}"
                size = size + _dir_bytes(log_dir) if size is not None and log_dir.is_dir() else None
            out.append({"topic": name, "partitions": len(meta.topics[name].partitions), "records": span,
                        "bytes": size})
    finally:
        consumer.close()
    return out


def bucket_sizes(settings: Settings, timeout: float = 3.0) -> list[dict[str, Any]]:
    from spotreel.platform.s3 import s3_client

    s3 = s3_client(settings, timeout)
    out = []
    for bucket in (settings.s3_bucket_artifacts, settings.s3_bucket_checkpoints):
        objects = size = 0
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for obj in page.get("Contents", []):
                objects, size = objects + 1, size + obj["Size"]
        out.append({"bucket": bucket, "objects": objects, "bytes": size})
    return out


def collect(settings: Settings, timeout: float = 3.0, kafka: bool = True, s3: bool = True) -> dict[str, Any]:
    """Sizes of what is up (`kafka`, `s3`: whether to ask; a server that is down is not waited for)."""
    report: dict[str, Any] = {}
    try:
        if not kafka:
            raise ConnectionError("kafka is not healthy")
        report["topics"] = topic_sizes(settings, timeout)
        table = changelog_topic(settings, "jobs")
        report["table"] = next(({"table": "jobs", **t} for t in report["topics"] if t["topic"] == table), None)
    except Exception as exc:  # noqa: BLE001 - a status line, never a failed status
        report["topics_error"] = f"{type(exc).__name__}: {exc}"
    try:
        if not s3:
            raise ConnectionError("s3 is not healthy")
        report["buckets"] = bucket_sizes(settings, timeout)
    except Exception as exc:  # noqa: BLE001
        report["buckets_error"] = f"{type(exc).__name__}: {exc}"
    return report


def human_bytes(n: int | None) -> str:
    if n is None:
        return "? B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def render(sizes: dict[str, Any]) -> list[str]:
    lines = ["  sizes:"]
    table = sizes.get("table")
    if table is not None:
        lines.append(f"    scheduler table {table['table']}: changelog {human_bytes(table['bytes'])}, "
                     f"offset span {table['records']}")
    if "topics_error" in sizes:
        lines.append(f"    topics: unavailable ({sizes['topics_error']})")
    for t in sizes.get("topics", []):
        lines.append(f"    topic {t['topic']}: {human_bytes(t['bytes'])}, offset span {t['records']} "
                     f"({t['partitions']} partitions)")
    if "buckets_error" in sizes:
        lines.append(f"    buckets: unavailable ({sizes['buckets_error']})")
    for b in sizes.get("buckets", []):
        lines.append(f"    bucket {b['bucket']}: {b['objects']} objects, {human_bytes(b['bytes'])}")
    return lines
