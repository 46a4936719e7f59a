"""Cassandra side of the projector: prepared writes run concurrently, job histories read back for the
in-memory fold after a restart, pool_stats recounted from pool_jobs."""

from __future__ import annotations

import logging
from typing import Any, Iterable

from cassandra.cluster import Session
from cassandra.concurrent import execute_concurrent, execute_concurrent_with_args
from cassandra.query import PreparedStatement

from spotreel.services.projector.projection import POOL_JOBS, RowOp

log = logging.getLogger("spotreel.projector")

# Tables the projector owns, emptied by `--rebuild --truncate`.
PROJECTED_TABLES = ("jobs_by_id", "jobs_by_tenant", "events_by_job", "rejections_by_job", "attempts_by_job",
                    "pool_jobs", "pool_stats", "workers")

LIVE = ("leased", "running")


class Store:
    def __init__(self, session: Session, concurrency: int = 64) -> None:
        self.session = session
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
        work = [(self._statement(op), self._params(op)) for op in ops]
        if work:
            execute_concurrent(self.session, work, concurrency=self.concurrency, raise_on_first_error=True)
        return len(work)

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
