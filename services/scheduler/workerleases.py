"""One job per worker across partitions: which leases each worker holds, whichever partition granted them.

Partitions share no job state, so without this a worker could hold a lease from partition 0 and be granted
another by partition 1 (a replayed RequestWork, a transport that asked a second partition while the first
was slow). Every owner publishes its grants and lease ends to the compacted `<prefix>.worker-leases`
(key `worker/job`, so compaction keeps the latest word on each lease; partition `partition_for(worker)`, so
one worker's records are in one order) and every scheduler instance reads the whole topic into
`WorkerLeaseIndex`:

- a RequestWork from a worker that holds a lease anywhere is answered NoWorkAvailable("worker_holds_lease");
- two partitions that granted the same worker in the same moment (neither had read the other's record yet)
  converge: the owner of the later grant (by grant time, then partition) hands its lease back as
  unclaimed if the worker never acted on it (the domain refuses that once the lease is confirmed, and the
  gateway's lease desk and the Kafka transport deliver a worker only one lease anyway);
- on assignment the owner republishes the leases it holds and ends those the index still shows for its
  partition but it no longer holds (an owner that died between ending a lease and publishing it).
A worker restarted under the same id waits for its old lease to end (its TTL) before it gets work.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict

from spotreel.adapters.compacted import CompactedReader
from spotreel.codec import Codec
from spotreel.domain import events as ev
from spotreel.platform.topics import worker_leases_topic
from spotreel.config.settings import Settings

log = logging.getLogger("spotreel.scheduler.workerleases")


def record_key(worker_id: str, job_id: str) -> bytes:
    return f"{worker_id}/{job_id}".encode()


class WorkerLeaseIndex:
    """Held leases per worker, from the topic (a consumer thread); `caught_up` once the topic's contents at
    start were read."""

    def __init__(self, settings: Settings, codec: Codec | None = None) -> None:
        self.settings = settings
        self.codec = codec or Codec.default()
        self.topic = worker_leases_topic(settings)
        self._lock = threading.Lock()
        self._held: dict[str, dict[str, ev.WorkerLeaseHeld]] = defaultdict(dict)
        self._doubly: set[str] = set()  # workers holding two leases or more (double grants to hand back)
        self._reader = CompactedReader(settings, "worker-leases", [self.topic], self.apply, codec=self.codec,
                                       fetch_wait_ms=50)
        self.caught_up = self._reader.caught_up

    # -- what the scheduler asks -------------------------------------------------------------------------

    def held_by(self, worker_id: str) -> list[ev.WorkerLeaseHeld]:
        with self._lock:
            return list(self._held.get(worker_id, {}).values())

    def holds(self, worker_id: str) -> bool:
        """Whether the worker holds a lease anywhere."""
        with self._lock:
            return bool(self._held.get(worker_id))

    def doubly_held(self) -> list[str]:
        """The workers the index shows holding more than one lease (kept as records are applied)."""
        with self._lock:
            return list(self._doubly)

    def of_partition(self, partition: int) -> list[ev.WorkerLeaseHeld]:
        with self._lock:
            return [r for leases in self._held.values() for r in leases.values() if r.partition == partition]

    def apply(self, record: ev.WorkerLeaseHeld) -> None:
        """Also called for the owner's own records as it produces them, so it need not wait to read them."""
        with self._lock:
            leases = self._held[record.worker_id]
            current = leases.get(record.job_id)
            if current is not None and current.epoch > record.epoch:
                return  # an older lease's word, read late
            if record.held:
                leases[record.job_id] = record
            else:
                leases.pop(record.job_id, None)
                if not leases:
                    del self._held[record.worker_id]
            if len(leases) > 1:
                self._doubly.add(record.worker_id)
            else:
                self._doubly.discard(record.worker_id)

    # -- the consumer thread (adapters/compacted.py) ------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether `start` was called (its reader thread exists); the scheduler starts it once."""
        return self._reader.started

    def start(self) -> None:
        self._reader.start()

    def close(self) -> None:
        self._reader.close()


def later_grant(mine: ev.WorkerLeaseHeld, other: ev.WorkerLeaseHeld) -> bool:
    """Whether `mine` is the later of two grants to one worker (the one to hand back)."""
    return (mine.granted_at_ms, mine.partition, mine.job_id) > (other.granted_at_ms, other.partition, other.job_id)
