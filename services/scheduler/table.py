"""The job table: one Faust table (memory store, compacted changelog `<app id>-jobs-changelog`) holding, per
commands partition, the job states, evicted jobs' summaries (`~e:<job>`, domain/retention.py), schedules
(`~s:<schedule>`) and one marker (`~meta:<p>`: the events-topic offset the table reflects, README.md
"Exactly-once"). Every key lives in the changelog partition of its job, schedule or marker.

`Store` is the scheduler's read-through cache over the table and the only code that sends to its
changelog (`put`, `delete`): the pipeline, the rebuild and the eviction tick write through it."""

from __future__ import annotations

from dataclasses import dataclass

import json
from typing import Any

import faust

from spotreel.adapters.partitioning import partition_for
from spotreel.domain.schedules import ScheduleState
from spotreel.domain.state import JobState

from spotreel.services.scheduler import statecodec
from spotreel.services.scheduler.partition import PartitionState


def meta_key(p: int) -> bytes:
    return b"~meta:%d" % p


def schedule_key(schedule_id: str) -> bytes:
    # Schedules share the table (and its changelog partition = the schedule's partition) with the jobs.
    return b"~s:" + schedule_id.encode()


def key_partition(key: bytes, partitions: int) -> int | None:
    """The changelog partition of a table key: a job's, a summary's (~e:), a schedule's (~s:), a marker's."""
    if key.startswith(b"~meta:"):
        return int(key[6:])
    for prefix in (b"~s:", statecodec.SUMMARY_PREFIX):
        if key.startswith(prefix):
            return partition_for(key[len(prefix):], partitions)
    return None if key.startswith(b"~") else partition_for(key, partitions)


class JobTable(faust.Table):
    """The job table; tells the scheduler when Faust finished restoring it after a rebalance."""

    on_restored: Any = None

    async def on_recovery_completed(self, active_tps, standby_tps) -> None:
        await super().on_recovery_completed(active_tps, standby_tps)
        if self.on_restored is not None:
            await self.on_restored()


@dataclass(eq=False, repr=False)
class Store:
    """The scheduler's read-through cache over the job table and the only code that sends to its changelog
    (`put`, `delete`). `cache` (job id -> state) is what the pipeline decides against; the pipeline, the
    rebuild and the eviction tick write through here. Depends on the table and the partition count only."""

    table: Any
    partitions: int

    def __post_init__(self) -> None:
        self.cache: dict[str, JobState | None] = {}
        self.schedule_cache: dict[str, ScheduleState | None] = {}

    def get(self, job_id: str) -> JobState | None:
        if job_id in self.cache:
            return self.cache[job_id]
        raw = self.table.data.get(job_id.encode())
        if raw is None:
            # An evicted job is its summary (domain/retention.py), under its own key. Not cached: a summary is
            # rarely asked for, and as a JobState object it would cost as much memory as a whole job.
            summary = statecodec.loads_summary(job_id, self.table.data.get(statecodec.summary_key(job_id)))
            if summary is not None:
                return summary
        state = self.cache[job_id] = statecodec.loads(raw)
        return state

    def get_schedule(self, schedule_id: str) -> ScheduleState | None:
        if schedule_id not in self.schedule_cache:
            self.schedule_cache[schedule_id] = statecodec.loads_schedule(self.table.data.get(schedule_key(schedule_id)))
        return self.schedule_cache[schedule_id]

    def clear_caches(self) -> None:
        self.cache.clear()
        self.schedule_cache.clear()

    def put_schedule(self, p: int, state: ScheduleState) -> None:
        self.schedule_cache[state.schedule_id] = state
        self.write_schedule(p, state)

    def write_schedule(self, p: int, state: ScheduleState) -> None:
        """The schedule to the table and its changelog, its cache entry as it is."""
        self.put(p, schedule_key(state.schedule_id), statecodec.dumps_schedule(state))

    def put(self, p: int, key: bytes, value: bytes) -> None:
        self.table.data[key] = value
        self.table.send_changelog(p, key, value)

    def put_state(self, p: int, state: JobState) -> None:
        self.cache[state.job_id] = state
        self.write_job(p, state)

    def write_job(self, p: int, state: JobState) -> None:
        """The job to the table and its changelog, its cache entry as it is."""
        if state.evicted:  # a summary that a late command changed (its version): it stays a summary
            self.put(p, statecodec.summary_key(state.job_id), statecodec.dumps_summary(state))
        else:
            self.put(p, state.job_id.encode(), statecodec.dumps(state))

    def delete(self, p: int, key: bytes) -> None:
        """Remove a key from the table: a tombstone in the compacted changelog."""
        self.table.data.pop(key, None)
        getattr(self.table.data, "_key_partition", {}).pop(key, None)  # the memory store's restore index
        self.table.send_changelog(p, key, None)

    def put_marker(self, part: PartitionState) -> None:
        self.put(part.partition, meta_key(part.partition), json.dumps({"events_offset": part.events_offset}).encode())

    def forget_unowned(self, assigned: set[int]) -> None:
        """Drop the keys of partitions this process does not own from its memory. Faust's memory store forgets
        only the keys it restored, not those this process wrote; a stale copy kept while another owner
        evicted the job would outlive the tombstone once compaction drops it (delete.retention.ms), and come
        back to life if the partition returns here. The changelog restores an owned partition whole."""
        n = self.partitions
        for key in [k for k in self.table.data.keys() if key_partition(k, n) not in assigned]:
            self.table.data.pop(key, None)
