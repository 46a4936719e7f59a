"""Bounded state benchmark (not a test): the scheduler's memory and its compacted changelog over many jobs,
with and without eviction (domain/retention.py).

No Kafka and no workers: the real `Scheduler` object (its Handler, cache, PartitionState, Faust memory-store
table and eviction sweep) is driven in-process on one partition, every job submitted, leased and completed
through `Handler.handle` with encoded commands, on a simulated clock (`--rate` jobs per simulated second).
About 1,000 jobs (3,000 commands) a second of wall time on the 2-core box when it is not busy: the default
50,000 jobs take 50-70 s. Its changelog writes go to a model of the compacted topic instead of Kafka: what compaction keeps is the
newest record of every key, a tombstone included until `delete.retention.ms` (Kafka's default, 24 h;
`--delete-retention-s`) has passed. Printed every `--every` jobs: the process RSS, the table's keys (jobs / summaries), the changelog's
records after compaction (live ones and tombstones) and
their bytes.

    .venv/bin/python bench/retention_bench.py [--jobs 50000] [--rate 100] [--retention-s 60]
                                              [--summary-s 240] [--no-evict]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import os
import platform
import sys
import tempfile
import time
from array import array
from dataclasses import replace
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spotreel.codec import Codec  # noqa: E402
from spotreel.domain import commands as c  # noqa: E402
from spotreel.domain import ids  # noqa: E402
from spotreel.domain.spec import RenderSpec  # noqa: E402
from spotreel.config.settings import Settings  # noqa: E402

from spotreel.services.scheduler import app as sched_app  # noqa: E402
from spotreel.services.scheduler import clock as sched_clock  # noqa: E402
from spotreel.services.scheduler import statecodec  # noqa: E402
from spotreel.services.scheduler.partition import PartitionState  # noqa: E402



class Changelog:
    """What a compacted topic keeps: the newest record per key; a tombstone until `keep_ms` old.
    Tombstones are kept as (time, bytes) in arrays, so the model itself adds little to the RSS measured."""

    def __init__(self, clock, keep_ms: int) -> None:
        self.clock, self.keep_ms = clock, keep_ms
        self.live: dict[bytes, int] = {}  # key -> bytes of its newest record (a value)
        self.tomb_at, self.tomb_bytes = array("q"), array("q")  # oldest first; expiry from the left
        self.appended = 0

    def send(self, partition, key: bytes, value: bytes | None, *args, **kwargs) -> None:
        self.appended += 1
        if value is not None:
            self.live[key] = len(key) + len(value)
        elif self.live.pop(key, None) is not None:
            self.tomb_at.append(self.clock())
            self.tomb_bytes.append(len(key))

    def compacted(self) -> tuple[int, int, int, int]:
        """(live records, their bytes, tombstones kept, their bytes) after a full compaction now."""
        first = bisect.bisect_right(self.tomb_at, self.clock() - self.keep_ms)
        return len(self.live), sum(self.live.values()), len(self.tomb_at) - first, sum(self.tomb_bytes[first:])


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=50_000)
    ap.add_argument("--rate", type=int, default=100, help="jobs per simulated second")
    ap.add_argument("--retention-s", type=int, default=60)
    ap.add_argument("--summary-s", type=int, default=240)
    ap.add_argument("--every", type=int, default=10_000)
    ap.add_argument("--no-evict", action="store_true", help="the baseline: nothing leaves the table")
    ap.add_argument("--delete-retention-s", type=int, default=86_400,
                    help="the changelog's delete.retention.ms in seconds (Kafka's default: a day)")
    args = ap.parse_args()

    settings = replace(Settings.from_env(), topic_prefix="bench.retention", partitions=1,
                       scheduler_retention_s=args.retention_s, scheduler_summary_retention_s=args.summary_s)
    codec = Codec.default()
    clock = [1_800_000_000_000]
    sched = sched_app.Scheduler(settings, data_dir=Path(tempfile.mkdtemp(prefix="retention-bench-")))
    log = Changelog(lambda: clock[0], args.delete_retention_s * 1000)
    sched.table.send_changelog = log.send
    sched.eviction.owned = lambda: {0}  # one partition, owned
    part = PartitionState(0)
    part.evictions.policy = sched.retention
    sched.parts[0] = part
    topic = sched.commands
    loop = asyncio.new_event_loop()
    offset = 0

    def apply(command) -> None:
        nonlocal offset
        offset += 1
        key = (getattr(command, "job_id", None) or command.worker_id).encode()
        out = sched.handler.handle(part, topic, offset, key, codec.encode_message(command), clock[0], clock[0])
        assert out.deadletter is None, out.deadletter
        # What on_batch does with a command's outcome, less the Kafka sends (command_batches.py, phases 1 and 4).
        for before, after in out.states.values():
            sched.store.cache[after.job_id] = after
            part.observe(before, after)
            sched.store.write_job(0, after)
        part.lease_news.clear()
        part.ledger.take_reports(0, clock[0])

    print(f"# {platform.node()} {platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}; "
          f"{args.jobs} jobs at {args.rate}/simulated s, retention {args.retention_s} s, summaries "
          f"{args.summary_s} s, eviction {'off' if args.no_evict else 'on'}, tombstones kept "
          f"{args.delete_retention_s} s")
    print(f"{'jobs':>7} {'sim_s':>6} {'rss_mib':>8} {'table_jobs':>10} {'summaries':>9} {'log_live':>8} "
          f"{'live_mib':>8} {'log_tombs':>9} {'tomb_mib':>8} {'appended':>9} {'wall_s':>6}")
    started = time.monotonic()
    step_ms = 1000 // args.rate if args.rate <= 1000 else 1
    with mock.patch.object(sched_clock, "now_ms", lambda: clock[0]):
        for i in range(1, args.jobs + 1):
            clock[0] += step_ms
            key = f"bench-{i}"
            job_id = ids.job_id_for("acme", key)
            apply(c.SubmitJob(f"s-{i}", job_id, "acme", key, ids.request_hash({"k": key}), "cpu",
                              RenderSpec("tiny-t2v", "a red fox in snow, cinematic, 4k", 2.0, "256x256", 8, i, 20)))
            apply(c.RequestWork(f"rw-{i}", "w-1", "cpu", ("tiny-t2v",), (), False, 30_000, clock[0]))
            state = sched.get(job_id)
            apply(c.CompleteJob(f"d-{i}", job_id, state.epoch, "w-1", ids.artifact_key(job_id, state.epoch),
                                "sha256:" + "0" * 64, 123_456))
            if i % args.rate == 0:  # once a simulated second, as the scheduler's timer and stats loops
                part.due(clock[0], sched.get)  # lease timers of ended jobs are dropped as they come due
                if not args.no_evict:
                    loop.run_until_complete(sched.evict())
            if i % args.every == 0:
                data = sched.table.data
                summaries = sum(1 for k in data.keys() if k.startswith(statecodec.SUMMARY_PREFIX))
                live, live_bytes, tombs, tomb_bytes = log.compacted()
                print(f"{i:>7} {(i * step_ms) // 1000:>6} {rss_mib():>8.1f} {len(data) - summaries:>10} "
                      f"{summaries:>9} {live:>8} {live_bytes / 2**20:>8.1f} {tombs:>9} {tomb_bytes / 2**20:>8.2f} "
                      f"{log.appended:>9} {time.monotonic() - started:>6.1f}", flush=True)


if __name__ == "__main__":
    main()
