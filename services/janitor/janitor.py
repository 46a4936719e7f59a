"""The janitor's loop: follow the events topic in its own consumer group and delete checkpoints as soon as
nothing can load them; every `sweep_every_s`, run the sweep (sweep.py) for what is due only later.

Per batch of records, in order: decode, collect the deletions (CheckpointRecorded: its `pruned_keys`;
JobSucceeded / JobCancelled: every checkpoint of the job), delete them (retried until S3 answers), and
only then commit the batch's offsets. Kill -9 anywhere: the next run re-reads from the last commit and
deletes again, which is harmless (a missing key deletes fine): at least once, never skipped.

A CheckpointRecorded's `pruned_keys` is decided by the scheduler's keep-newest-N window, so the worker
itself never deletes a checkpoint a retry may still need; it only clears its job's checkpoints after a
success it saw accepted (worker/job.py), which this loop repeats for the jobs whose worker did not.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from spotreel.platform.consumers import GROUP_MEMBER, consumer
from spotreel.codec import Codec, CodecError
from spotreel.domain import events as ev
from spotreel.services.janitor import objects
from spotreel.services.janitor.sweep import CHECKPOINTS, VIDEOS, SweepResult

# The reason of the cancel an erasure causes (domain/decide.py, _erase).
ERASED = "erased"

log = logging.getLogger("spotreel.janitor")


# The tuning knobs below are read from SPOTREEL_JANITOR_<NAME> (spotreel.config.knobs.dataclass_overrides, listed in
# docs/SETTINGS.md); the wiring fields come from Settings, and so does the sweep's period
# (SPOTREEL_JANITOR_SWEEP_EVERY_S, Settings.janitor_sweep_every_s).
ENV_PREFIX = "SPOTREEL_JANITOR_"
NOT_FROM_ENV = frozenset({"bootstrap", "group_id", "events_topic", "checkpoint_bucket", "artifact_bucket",
                          "sweep_every_s"})


@dataclass(frozen=True)
class JanitorConfig:
    bootstrap: str
    group_id: str
    events_topic: str
    checkpoint_bucket: str
    # Erased jobs' videos are deleted here too ("" : only checkpoints are deleted).
    artifact_bucket: str = ""
    # Events read from the topic at most per poll (their pruned checkpoints are deleted in one go).
    batch_size: int = 500
    # How long one poll waits for events before the loop looks at its sweep timer.
    poll_timeout_s: float = 0.5
    sweep_every_s: float = 600.0


@dataclass(frozen=True)
class Deletions:
    keys: tuple[str, ...] = ()  # single checkpoint objects
    jobs: tuple[str, ...] = ()  # every checkpoint of these jobs
    erased: tuple[str, ...] = ()  # every object of these jobs (JobErased, and the cancel an erasure caused)


def deletions_for(events: list[Any]) -> Deletions:
    keys: list[str] = []
    jobs: list[str] = []
    erased: list[str] = []
    for e in events:
        if isinstance(e, ev.CheckpointRecorded):
            keys.extend(e.pruned_keys)
        elif isinstance(e, (ev.JobSucceeded, ev.JobCancelled)):
            jobs.append(e.job_id)
        if isinstance(e, ev.JobErased) or (isinstance(e, ev.JobCancelled) and e.reason == ERASED):
            # Again after the gateway's own deletion: a worker still rendering when the job was erased may
            # upload a video or checkpoint before it learns of the cancel; the job's end comes after that.
            erased.append(e.job_id)
    return Deletions(tuple(dict.fromkeys(keys)), tuple(dict.fromkeys(jobs)), tuple(dict.fromkeys(erased)))


class Janitor:
    def __init__(self, config: JanitorConfig, s3,
                 sweep: Callable[[int, Callable[[], bool]], SweepResult] | None = None,
                 codec: Codec | None = None) -> None:
        self.config = config
        self.s3 = s3
        self.sweep = sweep
        self.codec = codec or Codec.default()
        self.deleted = 0  # objects, for logs and tests
        self.consumer = consumer(config.bootstrap, config.group_id, read_committed=True, fetch_wait_ms=500,
                                 quiet=True, extra=GROUP_MEMBER)

    async def run(self, stop: asyncio.Event) -> None:
        self.consumer.subscribe([self.config.events_topic])
        swept_at = time.monotonic() - self.config.sweep_every_s  # a first sweep right away
        try:
            while not stop.is_set():
                msgs = await asyncio.to_thread(self.consumer.consume, self.config.batch_size,
                                               self.config.poll_timeout_s)
                if msgs:
                    await self._handle(msgs, stop)
                if self.sweep is not None and time.monotonic() - swept_at >= self.config.sweep_every_s:
                    swept_at = time.monotonic()
                    await self._sweep(stop)
        finally:
            await asyncio.to_thread(self.consumer.close)

    async def _sweep(self, stop: asyncio.Event) -> None:
        try:
            got = await asyncio.to_thread(self.sweep, int(time.time() * 1000), stop.is_set)
            self.deleted += got.objects_deleted
            log.info("sweep: %d job prefixes seen, checkpoints of %d jobs and %d expired videos deleted "
                     "(%d objects)", got.jobs_seen, got.checkpoint_jobs_cleared, got.videos_expired,
                     got.objects_deleted)
        except Exception:  # noqa: BLE001 - S3 or Cassandra down: the next sweep does it, nothing is lost
            log.warning("sweep failed; tried again in %.0fs", self.config.sweep_every_s, exc_info=True)

    async def _handle(self, msgs: list[Any], stop: asyncio.Event) -> None:
        events: list[Any] = []
        ends: dict[tuple[str, int], int] = {}
        for m in msgs:
            if m.error() is not None:
                if m.error().code() != KafkaError._PARTITION_EOF:
                    log.warning("kafka: %s", m.error().str())
                continue
            ends[(m.topic(), m.partition())] = m.offset() + 1
            if m.value() is None:
                continue
            try:
                events.append(self.codec.decode_message(m.value()))
            except CodecError as exc:
                log.warning("skipping undecodable record %s@%d: %s", m.partition(), m.offset(), exc)
        todo = deletions_for(events)
        done = not (todo.keys or todo.jobs or todo.erased) or await self._until_done(lambda: self._delete(todo), stop)
        # Committed once the deletions are done, stopping or not: a janitor stopped between the deletions and
        # the commit would otherwise read the batch again on its next start.
        if ends and done:
            await asyncio.to_thread(self._commit, ends)

    def _delete(self, todo: Deletions) -> None:
        bucket = self.config.checkpoint_bucket
        n = objects.delete_keys(self.s3, bucket, todo.keys)
        for job_id in todo.jobs:
            n += objects.delete_prefix(self.s3, bucket, f"{CHECKPOINTS}{job_id}/")
        for job_id in todo.erased:
            n += objects.delete_prefix(self.s3, bucket, f"{CHECKPOINTS}{job_id}/")
            if self.config.artifact_bucket:
                n += objects.delete_prefix(self.s3, self.config.artifact_bucket, f"{VIDEOS}{job_id}/")
        self.deleted += n

    async def _until_done(self, call: Callable[[], None], stop: asyncio.Event) -> bool:
        """Deletions retry until they succeed (True) or the janitor stops (False): the batch's offsets are not
        committed before they succeed."""
        delay = 0.2
        while not stop.is_set():
            try:
                await asyncio.to_thread(call)
                return True
            except Exception as exc:  # noqa: BLE001 - every S3 error is retried
                log.warning("deletions failed (%s: %s); retrying in %.1fs", type(exc).__name__, exc, delay)
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                except asyncio.TimeoutError:
                    pass
                delay = min(delay * 2, 10.0)
        return False

    def _commit(self, ends: dict[tuple[str, int], int]) -> None:
        try:
            self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in ends.items()],
                                 asynchronous=False)
        except KafkaException as exc:
            # A partition revoked meanwhile refuses the commit; its new owner re-reads and re-deletes.
            log.warning("offset commit failed: %s", exc)
