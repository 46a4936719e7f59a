"""What the projector writes, as data: the read-model tables a job's events touch, and `RowOp`, one row
write (projection.py makes them, store.py applies them)."""

from __future__ import annotations

from typing import Any, NamedTuple

Key = tuple[tuple[str, Any], ...]
Values = tuple[tuple[str, Any], ...]

JOBS = "jobs_by_id"
TENANT_JOBS = "jobs_by_tenant"
EVENTS = "events_by_job"
REJECTIONS = "rejections_by_job"
ATTEMPTS = "attempts_by_job"
POOL_JOBS = "pool_jobs"
TENANT_LIVE = "tenant_live_jobs"  # a tenant's live jobs, as pool_jobs is a pool's (the in-flight guard)
WORKERS = "workers"

# Tables whose rows belong to one job: ops in a contiguous batch of that job's events may be merged.
JOB_SCOPED = frozenset({JOBS, TENANT_JOBS, EVENTS, REJECTIONS, ATTEMPTS, POOL_JOBS, TENANT_LIVE})


class RowOp(NamedTuple):
    """One write: set `values` on the row `key` of `table` at `timestamp`, or delete the row.

    A NamedTuple rather than a frozen dataclass: a batch makes several per event, and this is 4x cheaper
    to build."""

    table: str
    key: Key
    values: Values
    timestamp: int
    delete: bool = False

    @property
    def row_id(self) -> tuple[str, Key]:
        return self.table, self.key


class Envelope(NamedTuple):
    """What the projector knows about a record besides the decoded event."""

    payload: bytes = b""
    schema_name: str = ""
