"""The workers one partition has heard from, with what the pool stats and preemption count of them kept up
to date as each worker changes, instead of walked every second.

A worker enters the roll with a RequestWork (what it offers: pools, warm models, draining), is kept fresh by
its lease's commands and leaves it once not heard from for WORKER_WINDOW_MS (`forget`, every stats tick:
least recently heard first, so the sweep stops at the first fresh one). At the peak a partition remembers
thousands of workers (within a minute most of the fleet touches every partition); walking them all for the
pool stats and again for preemption's free workers was most of the scheduler's once-a-second tick. Here
each change moves the counts: idle workers of a pool (the ids, so preemption checks only those), warm idle
and draining ones. The roll is read like a mapping; only its methods change it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

# A worker heard from within this window (RequestWork, or a command of its lease) counts as present (pool
# stats); the partition forgets one it has not heard from for longer (`forget`). Preemption's free-worker
# window (preempting.FREE_WINDOW_MS) is shorter.
WORKER_WINDOW_MS = 60_000


@dataclass(frozen=True, slots=True)
class WorkerSeen:
    last_ms: int
    draining: bool
    pools: tuple[str, ...]  # pool keys (model@gpu) it offered to serve
    idle: bool
    warm: tuple[str, ...] = ()  # those whose model it has loaded (RequestWork.warm_models)
    fingerprint: str = ""  # its numerical environment (RequestWork.fingerprint, domain/resume_match.py)


class WorkerRoll(Mapping[str, WorkerSeen]):
    """worker_id -> WorkerSeen, least recently heard first, with per-pool counts of its idle (and not
    draining) workers, warm idle ones and draining ones."""

    def __init__(self) -> None:
        self._seen: dict[str, WorkerSeen] = {}
        self._idle: dict[str, set[str]] = {}
        self._warm_idle: Counter = Counter()
        self._draining: Counter = Counter()

    # -- reading -----------------------------------------------------------------------------------------

    def __getitem__(self, worker_id: str) -> WorkerSeen:
        return self._seen[worker_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._seen)

    def __len__(self) -> int:
        return len(self._seen)

    def idle_count(self, pool: str) -> int:
        """How many idle, not draining workers offered `pool`."""
        return len(self._idle.get(pool, ()))

    def idle_since(self, pool: str, since_ms: int) -> Iterator[str]:
        """The idle, not draining workers of `pool` heard from at or after `since_ms`."""
        seen = self._seen
        for worker_id in self._idle.get(pool, ()):
            if seen[worker_id].last_ms >= since_ms:
                yield worker_id

    def warm_idle_in(self, pool: str) -> int:
        return self._warm_idle[pool]

    def draining_in(self, pool: str) -> int:
        return self._draining[pool]

    # -- changing ----------------------------------------------------------------------------------------

    def asked(self, worker_id: str, seen: WorkerSeen) -> None:
        """A RequestWork: what the worker offers, as of now (moved to the end)."""
        old = self._seen.pop(worker_id, None)
        if old is not None:
            self._count(worker_id, old, -1)
        self._seen[worker_id] = seen
        self._count(worker_id, seen, 1)

    def heard(self, worker_id: str, now_ms: int, free: bool) -> None:
        """A command of the worker's lease: fresh again (moved to the end); idle when `free` (its command ended
        its lease) and it is not draining, else busy. A worker that never asked is not tracked."""
        old = self._seen.pop(worker_id, None)
        if old is None:
            return
        new = replace(old, last_ms=max(old.last_ms, now_ms), idle=free and not old.draining)
        self._count(worker_id, old, -1)
        self._seen[worker_id] = new
        self._count(worker_id, new, 1)

    def took_lease(self, worker_id: str) -> None:
        """The worker was granted a lease: no longer idle (its place in the order unchanged)."""
        old = self._seen.get(worker_id)
        if old is None or not old.idle:
            return
        self._count(worker_id, old, -1)
        new = self._seen[worker_id] = replace(old, idle=False)
        self._count(worker_id, new, 1)

    def forget(self, now_ms: int, window_ms: int = WORKER_WINDOW_MS) -> int:
        """Drop the workers not heard from within `window_ms` (from the front); how many."""
        stale = []
        for worker_id, seen in self._seen.items():  # one walk: `next(iter())` per drop would be quadratic
            if now_ms - seen.last_ms <= window_ms:
                break
            stale.append(worker_id)
        for worker_id in stale:
            self._count(worker_id, self._seen.pop(worker_id), -1)
        return len(stale)

    def _count(self, worker_id: str, seen: WorkerSeen, sign: int) -> None:
        for pool in seen.pools:
            if seen.draining:
                self._draining[pool] += sign
            elif seen.idle:
                ids = self._idle.setdefault(pool, set())
                if sign > 0:
                    ids.add(worker_id)
                else:
                    ids.discard(worker_id)
                if pool in seen.warm:
                    self._warm_idle[pool] += sign
