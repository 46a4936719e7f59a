"""Which jobs of a partition are due to leave the table, without scanning it: two heaps, kept by the owner.

The rules are the domain's (domain/retention.py): a terminal job is evicted `retention_ms` after its last
change and replaced by a summary; the summary is forgotten `summary_retention_ms` after that change. Every
state change of an owned partition passes through `observe` (PartitionState.observe, also on a rebuild from
the table), so a terminal job is pushed when it ends; entries are checked again against the current state
when they come due (a requeued or later-changed job simply is not due yet, and is pushed again when it
changes). Memory: one entry per terminal job and per summary still in the table.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from spotreel.domain.retention import Retention, evict_at, forget_at, summarize
from spotreel.domain.state import JobState


@dataclass
class Evictions:
    policy: Retention = field(default_factory=Retention)
    jobs: list[tuple[int, str]] = field(default_factory=list)  # (evict_at, job_id)
    summaries: list[tuple[int, str]] = field(default_factory=list)  # (forget_at, job_id)

    def observe(self, state: JobState | None) -> None:
        """A job's new state (or a summary read back from the table on a rebuild)."""
        if state is None:
            return
        due = forget_at(state, self.policy) if state.evicted else evict_at(state, self.policy)
        if due is not None:
            heapq.heappush(self.summaries if state.evicted else self.jobs, (due, state.job_id))

    def sweep(self, get: Callable[[str], JobState | None], now_ms: int,
              limit: int) -> tuple[list[JobState], list[str]]:
        """What leaves the table now: the summaries to write in place of the jobs due (whose keys are then
        tombstoned), and the job ids whose summaries are due to go (tombstoned too). At most `limit` of each;
        the rest stays due for the next sweep. `get` gives a job's current state (its summary if evicted)."""
        stubs = []
        for job_id in self.due_jobs(now_ms, limit):
            state = get(job_id)
            if evictable(state, self.policy, now_ms):
                stub = summarize(state)  # type: ignore[arg-type]
                stubs.append(stub)
                self.observe(stub)
        forgotten = [job_id for job_id in self.due_summaries(now_ms, limit)
                     if forgettable(get(job_id), self.policy, now_ms)]
        return stubs, forgotten

    def due_jobs(self, now_ms: int, limit: int) -> list[str]:
        return _pop_due(self.jobs, now_ms, limit)

    def due_summaries(self, now_ms: int, limit: int) -> list[str]:
        return _pop_due(self.summaries, now_ms, limit)

    def __len__(self) -> int:
        return len(self.jobs) + len(self.summaries)


def _pop_due(heap: list[tuple[int, str]], now_ms: int, limit: int) -> list[str]:
    out: list[str] = []
    while heap and heap[0][0] <= now_ms and len(out) < limit:
        out.append(heapq.heappop(heap)[1])
    return out


def evictable(state: JobState | None, policy: Retention, now_ms: int) -> bool:
    """Whether the job's current state may leave the table now (a popped entry may be stale)."""
    due = evict_at(state, policy)
    return due is not None and due <= now_ms


def forgettable(state: JobState | None, policy: Retention, now_ms: int) -> bool:
    """Whether the job's current state is a summary whose retention is over."""
    due = forget_at(state, policy) if state is not None else None
    return due is not None and due <= now_ms
