"""Which offset a partition may commit while deliveries run concurrently.

Deliveries finish out of order (one receiver is slow, another is down and retried for minutes), so the
committed offset is the lowest offset still being delivered — or one past the last record read when none
is. A restart re-reads from there: nothing unfinished is lost, and what is re-read is bounded by the
records read after the oldest unfinished delivery (those carry their event id; receivers dedupe, and
the notifier itself skips events its delivery table already marks delivered).
"""

from __future__ import annotations

import heapq
import threading

Partition = tuple[str, int]


class OffsetTracker:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # the consumer's rebalance callbacks run in its polling thread
        self._next: dict[Partition, int] = {}
        self._pending: dict[Partition, set[int]] = {}
        self._heaps: dict[Partition, list[int]] = {}
        self._committed: dict[Partition, int] = {}

    def read(self, tp: Partition, offset: int) -> None:
        """Every record read, deliverable or not, once its side effects on the store are written."""
        with self._lock:
            self._next[tp] = max(self._next.get(tp, 0), offset + 1)

    def begin(self, tp: Partition, offset: int) -> None:
        with self._lock:
            self._pending.setdefault(tp, set()).add(offset)
            heapq.heappush(self._heaps.setdefault(tp, []), offset)

    def done(self, tp: Partition, offset: int) -> None:
        with self._lock:
            self._pending.get(tp, set()).discard(offset)

    def in_flight(self) -> int:
        with self._lock:
            return sum(len(p) for p in self._pending.values())

    def _safe(self, tp: Partition) -> int | None:
        pending, heap = self._pending.get(tp, set()), self._heaps.get(tp, [])
        while heap and heap[0] not in pending:
            heapq.heappop(heap)
        if heap:
            return heap[0]
        return self._next.get(tp)

    def to_commit(self, only: set[Partition] | None = None) -> dict[Partition, int]:
        """Offsets that moved since the last `committed` call, per partition."""
        with self._lock:
            out = {}
            for tp in set(self._next) | set(self._pending):
                if only is not None and tp not in only:
                    continue
                safe = self._safe(tp)
                if safe is not None and safe != self._committed.get(tp):
                    out[tp] = safe
            return out

    def committed(self, offsets: dict[Partition, int]) -> None:
        with self._lock:
            self._committed.update(offsets)

    def forget(self, tps: set[Partition]) -> None:
        """Partitions revoked: their unfinished deliveries are the new owner's to redo."""
        with self._lock:
            for tp in tps:
                for table in (self._next, self._pending, self._heaps, self._committed):
                    table.pop(tp, None)
