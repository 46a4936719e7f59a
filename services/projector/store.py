"""Cassandra side of the projector: prepared writes run concurrently, job histories read back for the
in-memory fold after a restart, pool_stats recounted from pool_jobs."""

from __future__ import annotations

import logging
import threading
from itertools import chain
from operator import itemgetter
from typing import Any, Iterable

from cassandra.cluster import Session
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.query import BatchStatement, BatchType, PreparedStatement

from spotreel.services.projector.rows import POOL_JOBS, RowOp

log = logging.getLogger("spotreel.projector")

# Tables the projector owns, emptied by `--rebuild --truncate`.
PROJECTED_TABLES = ("jobs_by_id", "jobs_by_tenant", "events_by_job", "rejections_by_job", "attempts_by_job",
                    "pool_jobs", "tenant_live_jobs", "pool_stats", "workers", "schedules_by_id", "schedules_by_tenant",
                    "occurrences_by_schedule")

LIVE = ("leased", "running")

# Tables whose partition key is job_id alone.
BY_JOB = frozenset({"jobs_by_id", "events_by_job", "rejections_by_job", "attempts_by_job"})


# A request costs the Python driver far more client CPU than a row in it (tens of times a row of a batch:
# services/projector/README.md, "Throughput"), so the writes go out in as few requests as Cassandra takes
# without complaint:
# - one partition's rows as one unlogged batch, up to MAX_ROWS: a single-partition batch is one mutation,
#   and Cassandra applies no batch size check to it;
# - partitions too small to be worth a request of their own packed together, per replica, under the limits
#   above which Cassandra warns about a multi-partition batch on every request (batch_size_warn_threshold
#   5 KiB, unlogged_batch_across_partitions_warn_threshold 10 partitions).
MAX_ROWS = 200
PACK_BYTES = 4000
PACK_PARTITIONS = 10


_NAME = itemgetter(0)
_VALUE = itemgetter(1)


def row_bytes(op: RowOp) -> int:
    """A generous estimate of the row's size as Cassandra counts a batch (values, plus cell overhead)."""
    n = 32 + 24 * (len(op.key) + len(op.values))
    for v in chain(map(_VALUE, op.key), map(_VALUE, op.values)):
        if type(v) is str or type(v) is bytes:
            n += len(v)
    return n


class Store:
    def __init__(self, session: Session, concurrency: int = 64, max_rows: int = MAX_ROWS,
                 pack_bytes: int = PACK_BYTES, pack_partitions: int = PACK_PARTITIONS) -> None:
        self.session = session
        self.max_rows = max_rows
        self.pack_bytes = pack_bytes
        self.pack_partitions = pack_partitions
        self.concurrency = concurrency
        self.requests = 0
        self._prepared: dict[tuple[str, tuple[str, ...], tuple[str, ...], bool], PreparedStatement] = {}
        self._serializer_cache: dict[int, tuple[list[Any], int]] = {}  # id of a statement kept in _prepared
        self._history = session.prepare(
            "SELECT version, schema_name, payload FROM events_by_job WHERE job_id = ? AND version < ?")
        self._pool = session.prepare("SELECT status FROM pool_jobs WHERE pool = ?")
        self._pool_write = session.prepare(
            "INSERT INTO pool_stats (pool, queued, leased, updated_at) VALUES (?, ?, ?, ?)")

    def _statement(self, op: RowOp) -> PreparedStatement:
        sig = (op.table, tuple(map(_NAME, op.key)), tuple(map(_NAME, op.values)), op.delete)
        stmt = self._prepared.get(sig)
        if stmt is None:
            _, keys, cols, _ = sig
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
            return (op.timestamp, *map(_VALUE, op.key))
        return (*map(_VALUE, op.key), *map(_VALUE, op.values), op.timestamp)

    def _replica(self, partition_key: Any) -> Any:
        """The first replica of a (text) partition key, to pack only partitions that live together."""
        if not isinstance(partition_key, str):
            return None
        try:
            hosts = self.session.cluster.metadata.get_replicas(self.session.keyspace, partition_key.encode())
        except Exception:  # no token map yet: everything is one group, as on a single node
            return None
        return hosts[0].endpoint if hosts else None

    def _request(self, ops: list[RowOp]) -> tuple[Any, tuple[Any, ...]]:
        if len(ops) == 1:
            return self._statement(ops[0]), self._params(ops[0])
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        batch.add(self._statement(ops[0]), self._params(ops[0]))  # sets the batch's keyspace and routing key
        add = getattr(batch, "_add_statement_and_params", None)
        for op in ops[1:]:
            stmt = self._statement(op)
            if add is None or stmt.column_encryption_policy is not None:
                batch.add(stmt, self._params(op))
                continue
            # What BatchStatement.add does, without a BoundStatement, a ColDesc and an encryption check per
            # value: a third of the client's cost of a row (the driver is pinned; tests run it for real).
            serializers, version = self._serializers(stmt)
            add(True, stmt.query_id, [None if v is None else ser(v, version)
                                      for ser, v in zip(serializers, self._params(op))])
        return batch, ()

    def _serializers(self, stmt: PreparedStatement) -> tuple[list[Any], int]:
        found = self._serializer_cache.get(id(stmt))
        if found is None:
            found = self._serializer_cache[id(stmt)] = (
                [c.type.serialize for c in stmt.column_metadata], stmt.protocol_version)
        return found

    def write(self, ops: Iterable[RowOp]) -> int:
        """submit(ops) and wait for it: the number of rows written, or the first error."""
        return self.submit(ops).wait()

    def submit(self, ops: Iterable[RowOp]) -> "PendingWrites":
        """Starts the writes, in as few requests as Cassandra takes without complaint (see MAX_ROWS), at most
        `concurrency` of them in flight, and returns at once. Each statement keeps its own USING TIMESTAMP,
        so neither how they are grouped nor the order they land in changes what the tables end up holding.

        The tables keyed by job_id share a partition key value, so one job's history, attempt and row
        writes of a batch are one mutation on one replica."""
        groups: dict[tuple[str, Any], list[RowOp]] = {}
        n = 0
        for op in ops:
            first = op.key[0][1]
            groups.setdefault(("job", first) if op.table in BY_JOB else (op.table, first), []).append(op)
            n += 1
        work: list[tuple[Any, tuple[Any, ...]]] = []
        packs: dict[Any, list[Any]] = {}  # replica -> [ops, partitions, bytes]
        for (_, partition_key), group in groups.items():
            # A group of more rows than a pack takes partitions is big enough to go alone: no estimate needed.
            size = sum(map(row_bytes, group)) if len(group) <= 2 * self.pack_partitions else self.pack_bytes + 1
            if size > self.pack_bytes:
                for i in range(0, len(group), self.max_rows):
                    work.append(self._request(group[i:i + self.max_rows]))
                continue
            replica = self._replica(partition_key)
            pack = packs.get(replica)
            if pack is not None and (pack[1] >= self.pack_partitions or pack[2] + size > self.pack_bytes):
                work.append(self._request(pack[0]))
                pack = None
            if pack is None:
                pack = packs[replica] = [[], 0, 0]
            pack[0].extend(group)
            pack[1] += 1
            pack[2] += size
        for pack in packs.values():
            work.append(self._request(pack[0]))
        self.requests += len(work)
        return PendingWrites(self.session, work, self.concurrency, n)

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


class PendingWrites:
    """Requests in flight, at most `concurrency` at a time, each completion sending the next (on the
    driver's event loop). The driver's execute_concurrent_async still waits for every result before it
    returns (3.30), so this is what lets the projector decode and fold its next batch while Cassandra
    applies the last one. After the first error no further request is sent; wait() raises it once the
    ones in flight are answered."""

    def __init__(self, session: Session, work: list[tuple[Any, tuple[Any, ...]]], concurrency: int,
                 rows: int) -> None:
        self.rows = rows
        self._session = session
        self._work = iter(work)
        self._left = len(work)
        self._error: BaseException | None = None
        self._lock = threading.RLock()  # a callback of an answered future runs at once, in the caller
        self._done = threading.Event()
        if not self._left:
            self._done.set()
            return
        with self._lock:
            for _ in range(max(1, concurrency)):
                if not self._send():
                    break

    def _send(self) -> bool:
        """Sends the next request (lock held); False when there is none left to send."""
        item = next(self._work, None)
        if item is None:
            return False
        try:
            future = self._session.execute_async(*item)
        except Exception as exc:
            self._answered(exc)
            return True
        future.add_callbacks(self._ok, self._failed)
        return True

    def _ok(self, _result: Any) -> None:
        with self._lock:
            self._answered(None)

    def _failed(self, exc: BaseException) -> None:
        with self._lock:
            self._answered(exc)

    def _answered(self, exc: BaseException | None) -> None:
        self._left -= 1
        if exc is not None and self._error is None:
            self._error = exc
            self._left -= sum(1 for _ in self._work)  # never sent
        elif self._error is None:
            self._send()
        if self._left <= 0:
            self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self) -> int:
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self.rows


def pools_touched(ops: Iterable[RowOp]) -> set[str]:
    return {dict(op.key)["pool"] for op in ops if op.table == POOL_JOBS}
