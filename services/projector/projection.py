"""The pure projection: events in, row writes out. No I/O, so every rule here is unit-tested.

Idempotency and order-safety come from Cassandra's cell timestamps, not from reads:

- Every job-scoped write (jobs_by_id, jobs_by_tenant, events_by_job, attempts_by_job, pool_jobs,
  rejections_by_job) is `USING TIMESTAMP <event version>`. Cassandra keeps, per cell, the write with the
  highest timestamp, so a replayed event rewrites identical cells at an identical timestamp (no change),
  and an older event arriving late loses to the newer cells already there. No LWT (a Paxos round per
  write, four round trips) and no read-before-write are needed. `IF version < ?` would also be correct
  but an order of magnitude slower, and cannot express "some columns newer, some older".
- The price: only the projector may write these tables (a write without USING TIMESTAMP would carry
  "now" in microseconds and win forever), and a DELETE's tombstone must not be purged (gc_grace) before
  a replay of the events it shadows; a full rebuild replays in order, so it re-deletes anyway.
- workers rows are keyed by worker, across jobs, so the job version cannot order them. They use the
  owner's clock: at_ms * 1000 + version (capped), which also compares sensibly with the gateway's
  own (now-stamped) writes of the same row.

jobs_by_id is the fold: the projector keeps each job's `JobState` (rebuilt from events_by_job after a
restart) and writes only the columns an event changed, each at that event's version. The newest write
of each cell is then the cell's value in the folded state, whatever order the writes land in.

The consumer projects a whole batch at once (`project_batch`): the same writes, coalesced, so that a
job's many progress reports and renewals in one batch are one write per row at the newest version, and a
worker's heartbeats one last_seen_at (see `coalesce` and `BatchRows` for why that is safe). Every event
keeps its events_by_job row: the history API shows them, and a restart folds a job back from them.

CommandRejected takes no version slot, so it goes to rejections_by_job keyed by (version judged
against, command_id): deterministic, so replays overwrite, and distinct rejections never collide.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable, Iterable

from spotreel.domain import events as ev
from spotreel.domain.evolve import evolve
from spotreel.domain.spec import SPEC_FIELDS
from spotreel.domain.state import JobState
from spotreel.services.projector.job_rows import Rows, state_ops, state_rows
from spotreel.services.projector.rows import (ATTEMPTS, EVENTS, JOB_SCOPED, JOBS, REJECTIONS, WORKERS, Envelope, Key,
                                              RowOp)

# ---------------------------------------------------------------------------------------------------------
# Event-local rows: history, attempts, workers
# ---------------------------------------------------------------------------------------------------------

_HEADER = ("job_id", "version", "at_ms", "causation_id")
_QUIET = frozenset({"prompt", "request_hash", "idempotency_key", "checksum", "artifact_checksum",
                    "error_message", "pruned_keys", "resume_checkpoint_key", "checkpoint_key", "artifact_key",
                    "parents", "callback_url", "negative_prompt"})


_SALIENT: dict[type, tuple[str, ...]] = {}


def _flat_names(cls: type) -> list[str]:
    """The field names with a RenderSpec's in the places the flat JobSubmitted had them (model before
    gpu_type, the video where `spec` is, the render options last), so a history line reads as before."""
    names = [f.name for f in fields(cls)]
    if "spec" not in names:
        return names
    options = ("guidance_scale", "negative_prompt", "sampler", "input_image")
    core = [n for n in SPEC_FIELDS if n != "model" and n not in options]
    i = names.index("spec")
    names[i:i + 1] = core
    names.insert(names.index("gpu_type") if "gpu_type" in names else i, "model")
    return names + list(options)


def _salient(cls: type) -> tuple[str, ...]:
    names = _SALIENT.get(cls)
    if names is None:
        names = _SALIENT[cls] = tuple(
            n for n in _flat_names(cls) if n not in _HEADER and n not in _QUIET
            and not n.startswith(("backoff_", "poison_", "max_", "keep_")))
    return names


def summary(event: Any) -> str:
    """One line for the history API: the event type and its salient fields."""
    parts = []
    spec = getattr(event, "spec", None)
    for name in _salient(type(event)):
        value = getattr(spec, name) if spec is not None and name in SPEC_FIELDS else getattr(event, name)
        if value is None or value == ():
            continue
        parts.append(f"{name}={value}")
    line = f"{type(event).__name__}" + (f" {' '.join(parts)}" if parts else "")
    return line if len(line) <= 240 else line[:237] + "..."


def event_ops(event: Any, env: Envelope) -> list[RowOp]:
    ops = [RowOp(EVENTS, (("job_id", event.job_id), ("version", event.version)), (
        ("event_id", f"{event.job_id}/{event.version}"),
        ("event_type", type(event).__name__),
        ("occurred_at", event.at_ms),
        ("schema_name", env.schema_name),
        ("payload", env.payload),
        ("summary", summary(event)),
    ), event.version)]
    if isinstance(event, ev.JobErased):
        # Not part of the folded state (it keeps no personal field, nothing else): the event itself marks it.
        ops.append(RowOp(JOBS, (("job_id", event.job_id),), (("erased_at", event.at_ms),), event.version))
    return ops


def rejection_ops(e: ev.CommandRejected, env: Envelope) -> list[RowOp]:
    key = (("job_id", e.job_id), ("version", e.version), ("command_id", e.command_id))
    return [RowOp(REJECTIONS, key, (
        ("command_type", e.command_type), ("reason", e.reason), ("detail", e.detail),
        ("occurred_at", e.at_ms), ("epoch_given", e.epoch_given), ("current_epoch", e.current_epoch),
        ("payload", env.payload),
    ), e.version)]


def _ended_status(event: Any, before: JobState | None) -> tuple[str, str | None]:
    cancelling = before is not None and before.cancel_requested
    match event:
        case ev.LeaseExpired():
            return ("cancelled" if cancelling else "lost"), "lease_expired"
        case ev.LeaseReleased():
            return ("cancelled" if cancelling else "released"), event.reason
        case ev.AttemptFailed():
            return ("cancelled" if cancelling else "failed"), event.error_code
    return "succeeded", None


def attempt_ops(event: Any, before: JobState | None) -> list[RowOp]:
    def op(epoch: int, **values: Any) -> list[RowOp]:
        values["version"] = event.version
        return [RowOp(ATTEMPTS, (("job_id", event.job_id), ("lease_epoch", epoch)), tuple(values.items()),
                      event.version)]

    match event:
        case ev.JobLeased():
            start = event.resume_step or 0
            return op(event.epoch, worker_id=event.worker_id, pool=event.pool, status="leased",
                      started_at=event.at_ms, start_step=start, last_step=start)
        case ev.ProgressReported():
            return op(event.epoch, status="running", last_step=event.step)
        case ev.CheckpointRecorded():
            return op(event.epoch, last_step=event.step)
        case ev.LeaseExpired() | ev.LeaseReleased() | ev.AttemptFailed() | ev.JobSucceeded():
            status, reason = _ended_status(event, before)
            return op(event.epoch, status=status, ended_at=event.at_ms, reason=reason)
    return []


def worker_timestamp(event: Any) -> int:
    return event.at_ms * 1000 + min(event.version, 999)


def lease_timestamp(granted_at_ms: int, ended: bool) -> int:
    """The write time of a worker's status: ordered by the lease it concerns, not by when the event was stamped.

    A worker holds one lease at a time and asks for the next only after it finished the last, so its leases
    are granted in the order it ran them. Their end events are not stamped in that order: a completion whose
    verdict was slow (the worker moved on with a pending answer) can be judged on its job's partition after
    the next lease was granted on another. Stamped by the end's own time, that late "idle" would overwrite
    "busy" on the newer lease, and a capacity manager would drain a busy worker. Stamped by the lease it ends
    (just after that lease's "busy"), it can only overwrite its own lease's status.

    At the top of the lease's millisecond (998, 999), so a row written before this ordering (stamped
    at_ms * 1000 + version) still gives way: the end of a lease granted then wins over its old "busy", and a
    new "busy" (granted after the old end's millisecond) wins over that end."""
    return granted_at_ms * 1000 + (999 if ended else 998)


def worker_ops(event: Any, before: JobState | None) -> list[RowOp]:
    lease = before.lease if before is not None else None
    holder = lease.worker_id if lease is not None else None

    def op(worker: str | None, ts: int, **values: Any) -> list[RowOp]:
        if not worker:
            return []
        return [RowOp(WORKERS, (("worker_id", worker),), tuple(values.items()), ts)]

    def seen(worker: str | None) -> list[RowOp]:
        return op(worker, worker_timestamp(event), last_seen_at=event.at_ms)

    def ended(worker: str | None, status: str) -> list[RowOp]:
        ts = lease_timestamp(lease.granted_at_ms, True) if lease is not None else worker_timestamp(event)
        return op(worker, ts, status=status, current_job_id=None, current_epoch=None)

    match event:
        case ev.JobLeased():
            return op(event.worker_id, lease_timestamp(event.at_ms, False), pool=event.pool, status="busy",
                      current_job_id=event.job_id, current_epoch=event.epoch) + seen(event.worker_id)
        case ev.LeaseRenewed() | ev.ProgressReported() | ev.CheckpointRecorded():
            return seen(holder)
        case ev.LeaseExpired():
            # Missed its heartbeats: presumed gone until it is leased work again.
            return ended(event.worker_id, "gone")
        case ev.LeaseReleased() | ev.AttemptFailed():
            return ended(event.worker_id, "idle") + seen(event.worker_id)
        case ev.JobSucceeded():
            return ended(holder, "idle") + seen(holder)
    return []


# ---------------------------------------------------------------------------------------------------------
# One event
# ---------------------------------------------------------------------------------------------------------


def _schedule_ops(event: Any) -> list[RowOp]:
    """Schedule events' rows (schedule_rows.py; imported here, not at the top, since it uses RowOp)."""
    if not isinstance(event, ev.SCHEDULE_EVENTS):
        return []
    from spotreel.services.projector.schedule_rows import schedule_ops

    return schedule_ops(event)


def is_job_event(event: Any) -> bool:
    return isinstance(event, ev.JOB_EVENTS)


def project(state: JobState | None, event: Any, env: Envelope = Envelope()) -> tuple[JobState | None, list[RowOp]]:
    """(state after, writes) for one event of the job whose folded state is `state`.

    An event at or below the state's version was applied already (a replay, or a redelivery after a
    crash): its history row is rewritten (identical), nothing else."""
    if not is_job_event(event):
        return state, _schedule_ops(event)
    if isinstance(event, ev.CommandRejected):
        return state, rejection_ops(event, env)
    ops = event_ops(event, env)
    if state is not None and event.version <= state.version:
        return state, ops
    after = evolve(state, event)
    ops += attempt_ops(event, state) + worker_ops(event, state)
    if after is not None and after is not state:
        ops += state_ops(state, after)
    return after, ops


# ---------------------------------------------------------------------------------------------------------
# Batching
# ---------------------------------------------------------------------------------------------------------


def coalesce(ops: list[RowOp]) -> list[RowOp]:
    """Fewer writes with the same outcome, for ops of one batch of contiguous events.

    Per job-scoped row: the newest delete shadows everything at or below it; the writes above it merge
    into one at the highest timestamp, each column keeping its newest value. Safe because a batch holds
    every version of a job between its first and last event, so no write from outside the batch has a
    timestamp between a merged column's own and the merged one. workers rows (cross-job) are left alone.
    """
    groups: dict[tuple[str, Key], list[RowOp]] = {}
    out: list[RowOp] = []
    for op in ops:
        if op.table in JOB_SCOPED:
            groups.setdefault(op.row_id, []).append(op)
        else:
            out.append(op)
    for (table, key), group in groups.items():
        group = sorted(group, key=lambda o: (o.timestamp, not o.delete))
        deletes = [o for o in group if o.delete]
        floor = deletes[-1].timestamp if deletes else None
        if deletes:
            out.append(deletes[-1])
        live = [o for o in group if not o.delete and (floor is None or o.timestamp > floor)]
        if live:
            merged: dict[str, Any] = {}
            for o in live:
                merged.update(o.values)
            out.append(RowOp(table, key, tuple(merged.items()), live[-1].timestamp))
    return out


class BatchRows:
    """The writes of one batch, coalesced as they are produced: what `coalesce` makes of the same ops for the
    job-scoped tables, and the newest cell per column for workers rows.

    Job-scoped rows: per row, the newest delete is kept and shadows every write at or below it; the writes
    above it become one at their highest timestamp, each column with its newest value (see `coalesce` for
    why a batch of contiguous events may do that).

    workers rows are keyed by worker, across jobs, and stamped with the owner's clock, not a job version, so
    their writes are not merged into one timestamp: each column keeps its newest (timestamp, value), exactly
    the cell Cassandra would keep from the separate writes, and the columns are written grouped by timestamp
    (a batch's many heartbeats of one worker become one last_seen_at). Two different values of one column at
    one timestamp are left to Cassandra (it keeps the greater): the second write is passed on as it is.
    """

    def __init__(self) -> None:
        # row -> [delete floor or None, highest write timestamp or None, {column: (timestamp, value)}]
        # row -> its only write so far (most rows: a history row, a rejection), or
        # [delete floor or None, highest write timestamp or None, {column: (timestamp, value)}]
        self._rows: dict[tuple[str, Key], RowOp | list[Any]] = {}
        # worker row -> [highest write timestamp (its row marker), {column: (timestamp, value)}]
        self._workers: dict[Key, list[Any]] = {}
        self._asis: list[RowOp] = []

    def add(self, op: RowOp) -> None:
        if op.table in JOB_SCOPED:
            rid = (op.table, op.key)
            row = self._rows.get(rid)
            if row is None and not op.delete:
                self._rows[rid] = op
                return
            if row is None:
                row = self._rows[rid] = [None, None, {}]
            elif type(row) is RowOp:
                first = row
                row = self._rows[rid] = [None, first.timestamp, {c: (first.timestamp, v) for c, v in first.values}]
            self._merge(row, op)
        elif op.table == WORKERS and not op.delete:
            ts = op.timestamp
            row = self._workers.get(op.key)
            if row is None:
                row = self._workers[op.key] = [ts, {}]
            elif ts > row[0]:
                row[0] = ts
            cols = row[1]
            tied = False
            for col, value in op.values:
                cell = cols.get(col)
                if cell is None or ts > cell[0]:
                    cols[col] = (ts, value)
                elif ts == cell[0] and value != cell[1]:
                    tied = True
            if tied:
                self._asis.append(op)
        else:
            self._asis.append(op)

    @staticmethod
    def _merge(row: list[Any], op: RowOp) -> None:
        ts = op.timestamp
        if op.delete:
            if row[0] is None or ts > row[0]:
                row[0] = ts
            return
        if row[1] is None or ts > row[1]:
            row[1] = ts
        cols = row[2]
        for col, value in op.values:
            cell = cols.get(col)
            if cell is None or ts >= cell[0]:
                cols[col] = (ts, value)

    def extend(self, ops: Iterable[RowOp]) -> None:
        for op in ops:
            self.add(op)

    def ops(self) -> list[RowOp]:
        out: list[RowOp] = []
        for (table, key), row in self._rows.items():
            if type(row) is RowOp:
                out.append(row)
                continue
            floor, top, cols = row
            if floor is not None:
                out.append(RowOp(table, key, (), floor, delete=True))
            if top is not None and (floor is None or top > floor):
                values = tuple(sorted((c, v) for c, (ts, v) in cols.items() if floor is None or ts > floor))
                out.append(RowOp(table, key, values, top))
        for key, (marker, cols) in self._workers.items():
            by_ts: dict[int, list[tuple[str, Any]]] = {marker: []}  # the newest write's row marker too
            for col, (ts, value) in cols.items():
                by_ts.setdefault(ts, []).append((col, value))
            for ts, values in by_ts.items():
                out.append(RowOp(WORKERS, key, tuple(sorted(values)), ts))
        out += self._asis
        return out


def project_batch(items: Iterable[tuple[Any, Envelope]], state_of: Callable[[str], JobState | None],
                  restored: Iterable[RowOp] = (), known_rows: dict[str, tuple[JobState, Rows]] | None = None,
                  ) -> tuple[list[RowOp], dict[str, JobState | None]]:
    """(writes, state after the batch of every job with an accepted event in it) for a batch of events in
    partition order, each job starting from `state_of(job_id)`; `restored`: writes to put first (the full
    rows of jobs whose state was folded back from their history); `known_rows`: job -> (a state, its
    state_rows), used when that state is the job's, and updated (a cache the caller keeps between batches).

    The same rows as `project` on each event in turn followed by `coalesce` (workers rows coalesced too, see
    BatchRows), for less: each job's rows are computed once per event it changed and compared with the
    previous event's rather than recomputed from both states (params JSON reused), and nothing is written
    twice. tests/unit/test_projection_batch.py holds it to the per-event projection."""
    rows = BatchRows()
    rows.extend(restored)
    states: dict[str, JobState | None] = {}
    current = known_rows if known_rows is not None else {}  # job -> (state, its state_rows)
    for event, env in items:
        if not isinstance(event, ev.JOB_EVENTS):
            if isinstance(event, ev.SCHEDULE_EVENTS):
                rows.extend(_schedule_ops(event))
            continue
        if isinstance(event, ev.CommandRejected):
            rows.extend(rejection_ops(event, env))
            continue
        job = event.job_id
        state = states[job] if job in states else state_of(job)
        rows.extend(event_ops(event, env))
        if state is not None and event.version <= state.version:
            states[job] = state
            continue
        after = evolve(state, event)
        rows.extend(attempt_ops(event, state))
        rows.extend(worker_ops(event, state))
        if after is not None and after is not state:
            known = current.get(job)
            if state is None:
                was_rows = None
            elif known is not None and known[0] is state:
                was_rows = known[1]
            else:
                was_rows = state_rows(state)
            now_rows = state_rows(after, (state, was_rows) if was_rows is not None else None)
            rows.extend(state_ops(state, after, (was_rows, now_rows)))
            current[job] = (after, now_rows)
        states[job] = after
    return rows.ops(), states
