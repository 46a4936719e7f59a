"""A job at the latest time the API takes (limits.MAX_TIME_MS, the end of year 9999) goes through the real
projector writes and reads back through the gateway's reads from real Cassandra. A later run_at could not be
read back: the Python driver fails to decode the timestamp and drops its connection, and with it every read of
the gateway (a run_at of 2**53 ms, as an API fuzzer draws, is one). The API and the domain refuse such times
(tests/unit/test_time_limits.py)."""

from __future__ import annotations

import asyncio

from spotreel.domain import limits
from spotreel.domain.decide import decide
from spotreel.platform.migrate import migrate
from spotreel.services.gateway.cassandra_store import CassandraReads
from spotreel.services.projector.projection import project
from spotreel.services.projector.store import Store
from tests.unit.jobkit import submit


def test_a_job_at_the_latest_time_is_projected_and_read_back(cql, unique):
    migrate(cql, unique, say=lambda *_: None)
    command = submit(run_at_ms=limits.MAX_TIME_MS)
    store, p = Store(cql), None
    events = decide(None, command, 1_700_000_000_000)
    assert [type(e).__name__ for e in events] == ["JobSubmitted", "JobScheduled"]
    for event in events:
        p, ops = project(p, event)
        store.write(ops)
    reads = CassandraReads(cql)
    job = asyncio.run(reads.get_job(command.job_id))
    assert job is not None and job.status == "scheduled" and job.run_at_ms == limits.MAX_TIME_MS
    # The connection is still up: another read answers.
    assert asyncio.run(reads.get_job(command.job_id)) is not None
