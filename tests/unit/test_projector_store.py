"""The projector store's request plan and its writes in flight, without Cassandra: every row goes out exactly
once, in requests Cassandra takes without a warning, at most `concurrency` at a time, and a failure stops
the sending and is raised to the caller once the requests in flight are answered."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.services.projector import rows as pr
from spotreel.services.projector.store import PACK_BYTES, PACK_PARTITIONS, PendingWrites, Store, row_bytes
from tests.harness.hypothesis_profiles import examples


class _Future:
    def __init__(self, item) -> None:
        self.item = item
        self.callbacks = None

    def add_callbacks(self, ok, failed) -> None:
        self.callbacks = (ok, failed)


class _Session:
    keyspace = "ks"
    cluster = None  # no token map: every partition on the one replica

    def __init__(self) -> None:
        self.sent: list[_Future] = []

    def prepare(self, cql):
        return cql

    def execute_async(self, statement, params):
        f = _Future((statement, params))
        self.sent.append(f)
        return f


class _PlanStore(Store):
    """The real grouping and packing; a request is the list of its ops."""

    def _request(self, ops):
        return list(ops), ()


def _partition(op: pr.RowOp):
    return ("job", op.key[0][1]) if op.table in ("jobs_by_id", "events_by_job", "rejections_by_job",
                                                 "attempts_by_job") else (op.table, op.key[0][1])


_op = st.builds(
    lambda table, part, n, size, ts: pr.RowOp(table, (("k", f"p{part}"), ("c", n)), (("v", "x" * size),), ts),
    st.sampled_from(["events_by_job", "jobs_by_id", "workers", "jobs_by_tenant", "pool_jobs"]),
    st.integers(0, 30), st.integers(0, 400), st.sampled_from([0, 10, 300, 2000, 5000]), st.integers(1, 9))


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(_op, max_size=300))
def test_every_row_goes_once_in_requests_cassandra_takes_without_a_warning(ops):
    session = _Session()
    store = _PlanStore(session, concurrency=10_000)
    pending = store.submit(ops)
    requests = [f.item[0] for f in session.sent]
    assert sorted(map(repr, (op for r in requests for op in r))) == sorted(map(repr, ops))
    for r in requests:
        parts = {_partition(op) for op in r}
        if len(parts) > 1:  # Cassandra checks the size and spread of multi-partition batches only
            assert len(parts) <= PACK_PARTITIONS and sum(map(row_bytes, r)) <= PACK_BYTES
        assert len(r) <= store.max_rows
    for f in session.sent:
        f.callbacks[0](None)
    assert pending.wait() == len(ops) and store.requests == len(requests)


def test_at_most_concurrency_requests_in_flight_and_each_answer_sends_the_next():
    session = _Session()
    work = [(f"stmt{i}", ()) for i in range(7)]
    pending = PendingWrites(session, work, concurrency=3, rows=7)
    assert [f.item[0] for f in session.sent] == ["stmt0", "stmt1", "stmt2"]
    session.sent[0].callbacks[0](None)
    assert len(session.sent) == 4 and not pending.done()
    for i in range(7):
        if i != 0:
            session.sent[i].callbacks[0](None)
    assert pending.done() and pending.wait() == 7


def test_a_failure_stops_the_sending_and_is_raised_once_the_requests_in_flight_are_answered():
    session = _Session()
    pending = PendingWrites(session, [(f"stmt{i}", ()) for i in range(10)], concurrency=3, rows=10)
    boom = ConnectionError("no host available")
    session.sent[1].callbacks[1](boom)
    assert len(session.sent) == 3 and not pending.done()  # nothing more sent; two still in flight
    session.sent[0].callbacks[0](None)
    session.sent[2].callbacks[1](TimeoutError("late"))
    assert pending.done() and len(session.sent) == 3
    try:
        pending.wait()
    except ConnectionError as exc:
        assert exc is boom
    else:
        raise AssertionError("wait() returned after a failed write")


def test_nothing_to_write_is_done_at_once():
    assert PendingWrites(_Session(), [], concurrency=4, rows=0).wait() == 0
