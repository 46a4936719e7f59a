"""Cassandra side of the projector: prepared writes run concurrently, job histories read back for the
in-memory fold after a restart, pool_stats recounted from pool_jobs."""

from __future__ import annotations

import logging
from typing import Any, Iterable

from cassandra.cluster import Session
from cassandra.concurrent import execute_concurrent, execute_concurrent_with_args
from cassandra.query import BatchStatement, BatchType, PreparedStatement

from spotreel.services.projector.projection import POOL_JOBS, RowOp

log = logging.getLogger("spotreel.projector")

# Tables the projector owns, emptied by `--rebuild --truncate`.
PROJECTED_TABLES = ("jobs_by_id", "jobs_by_tenant", "events_by_job", "rejections_by_job", "attempts_by_job",
                    "pool_jobs", "pool_stats", "workers")

LIVE = ("leased", "running")

# Tables whose partition key is job_id alone.
BY_JOB = frozenset({"jobs_by_id", "events_by_job", "rejections_by_job", "attempts_by_job"})


class Store:
    def __init__(self, session: Session, concurrency: int = 64, max_batch: int = 12) -> None:
        self.session = session
        self.max_batch = max_batch
        self.concurrency = concurrency
        self._prepared: dict[tuple[str, tuple[str, ...], tuple[str, ...], bool], PreparedStatement] = {}
        self._history = session.prepare(
            "SELECT version, schema_name, payload FROM events_by_job WHERE job_id = ? AND version < ?")
        self._pool = session.prepare("SELECT status FROM pool_jobs WHERE pool = ?")
        self._pool_write = session.prepare(
            "INSERT INTO pool_stats (pool, queued, leased, updated_at) VALUES (?, ?, ?, ?)")

    def _statement(self, op: RowOp) -> PreparedStatement:
        keys = tuple(k for k, _ in op.key)
        cols = tuple(k for k, _ in op.values)
        sig = (op.table, keys, cols, op.delete)
        stmt = self._prepared.get(sig)
        if stmt is None:
            if op.delete:
                where = " AND ".join(f"{k} = ?" for k in keys)
                cql = f"DELETE FROM {op.table} USING TIMESTAMP ? WHERE {where}"
            else:
                names = keys + cols
                cql = (f"INSERT INTO {op.table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))}) "
                       "USING TIMESTAMP ?")
            stmt = self._prepared[sig] = self.session.prepare(cql)
        return stmt

    @staticmethod
    def _params(op: RowOp) -> tuple[Any, ...]:
        if op.delete:
            return (op.timestamp, *(v for _, v in op.key))
        return (*(v for _, v in op.key), *(v for _, v in op.values), op.timestamp)

    def write(self, ops: Iterable[RowOp]) -> int:
        """Writes grouped per partition into small unlogged batches, the batches run concurrently.

        The tables keyed by job_id share a partition key value, so one job's history, attempt and row
        writes of a batch become one mutation on one replica: a quarter of the requests of writing them
        one by one. Each statement keeps its own USING TIMESTAMP. Capped well under Cassandra's batch
        size limit (a rebuild may hold hundreds of one job's events in one batch)."""
        groups: dict[tuple[str, Any], list[RowOp]] = {}
        n = 0
        for op in ops:
            first = op.key[0][1]
            groups.setdefault(("job", first) if op.table in BY_JOB else (op.table, first), []).append(op)
            n += 1
        work: list[tuple[Any, tuple[Any, ...]]] = []
        for group in groups.values():
            for i in range(0, len(group), self.max_batch):
                chunk = group[i:i + self.max_batch]
                if len(chunk) == 1:
                    work.append((self._statement(chunk[0]), self._params(chunk[0])))
                    continue
                batch = BatchStatement(batch_type=BatchType.UNLOGGED)
                for op in chunk:
                    batch.add(self._statement(op), self._params(op))
                work.append((batch, ()))
        if work:
            execute_concurrent(self.session, work, concurrency=self.concurrency, raise_on_first_error=True)
        return n

    def histories(self, wanted: dict[str, int]) -> dict[str, list[tuple[str, bytes]]]:
        """job_id -> [(schema_name, payload)] of its recorded events below the given version, in order."""
        items = list(wanted.items())
        results = execute_concurrent_with_args(self.session, self._history, items, concurrency=self.concurrency,
                                               raise_on_first_error=True)
        out = {}
        for (job_id, _), (_, rows) in zip(items, results):
            out[job_id] = [(r.schema_name, r.payload) for r in rows]
        return out

    def refresh_pool_stats(self, pools: Iterable[str], now_ms: int) -> None:
        """Counts from pool_jobs, which is itself idempotent, so the counts are right after any replay."""
        pools = sorted(set(pools))
        if not pools:
            return
        results = execute_concurrent_with_args(self.session, self._pool, [(p,) for p in pools],
                                               concurrency=self.concurrency, raise_on_first_error=True)
        writes = []
        for pool, (_, rows) in zip(pools, results):
            statuses = [r.status for r in rows]
            queued = sum(1 for s in statuses if s == "queued")
            leased = sum(1 for s in statuses if s in LIVE)
            writes.append((pool, queued, leased, now_ms))
        execute_concurrent_with_args(self.session, self._pool_write, writes, concurrency=self.concurrency,
                                     raise_on_first_error=True)

    def truncate(self) -> None:
        for table in PROJECTED_TABLES:
            self.session.execute(f"TRUNCATE {table}", timeout=120)


def pools_touched(ops: Iterable[RowOp]) -> set[str]:
    return {dict(op.key)["pool"] for op in ops if op.table == POOL_JOBS}
