"""Batch projection (projection.project_batch, BatchRows): coalescing a batch's writes leaves exactly the rows
that projecting and writing each event on its own leaves, whatever the batch boundaries, write order,
redeliveries, or a projector that dies mid-batch and is replaced by one that starts from nothing."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spotreel.domain import events as ev
from spotreel.domain.evolve import fold
from spotreel.services.projector import job_rows as jr
from spotreel.services.projector import projection as pj
from spotreel.services.projector import rows as pr
from tests.unit.jobkit import Driver
from tests.unit.projection_histories import histories
from tests.unit.projection_model import Tables
from tests.harness.hypothesis_profiles import examples

FAST = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _env(event: Any) -> pr.Envelope:
    return pr.Envelope(b"payload-" + str(event.version).encode(), "spotreel.v1." + type(event).__name__)


def _interleaved(hs: list[list[Any]], rnd: random.Random) -> list[Any]:
    """The jobs' events as one partition holds them: each job's in order, the jobs interleaved."""
    queues = [list(h) for h in hs if h]
    out = []
    while queues:
        q = rnd.choice(queues)
        out.append(q.pop(0))
        if not q:
            queues.remove(q)
    return out


def _one_by_one(stream: list[Any]) -> dict:
    """The reference: every event projected on its own (its job's state carried), every write applied."""
    states: dict[str, Any] = {}
    t = Tables()
    for e in stream:
        state, ops = pj.project(states.get(e.job_id), e, _env(e))
        if not isinstance(e, ev.CommandRejected):
            states[e.job_id] = state
        t.apply_all(ops)
    return t.snapshot()


def _cuts(n: int, sizes: list[int]) -> list[tuple[int, int]]:
    out, i, k = [], 0, 0
    while i < n:
        step = sizes[k % len(sizes)]
        out.append((i, min(n, i + step)))
        i += step
        k += 1
    return out


class _Projector:
    """consumer.Projector's projection without Kafka or Cassandra: a state cache that starts empty, jobs met
    mid-history folded back from the history rows already written (what _restore reads), project_batch."""

    def __init__(self, written: Tables) -> None:
        self.states: dict[str, Any] = {}
        self.rows: dict[str, Any] = {}  # the row cache the consumer keeps from one batch to the next
        self.written = written

    def batch(self, events: list[Any]) -> list[pr.RowOp]:
        restored: list[pr.RowOp] = []
        for e in events:
            job = e.job_id
            if job in self.states or isinstance(e, ev.CommandRejected):
                continue
            if isinstance(e, ev.JobSubmitted):
                self.states[job] = None
                continue
            state = fold(self._history(job, e.version))
            self.states[job] = state
            if state is not None:
                restored += jr.full_state_ops(state)
        ops, states = pj.project_batch([(e, _env(e)) for e in events], self.states.get, restored, self.rows)
        self.states.update(states)
        self.rows = {job: self.rows[job] for job in states if job in self.rows}
        return ops

    def _history(self, job: str, below: int) -> list[Any]:
        rows = self.written.table(pr.EVENTS)
        return [_EVENTS[(job, version)] for (_, (_, version)) in sorted(k for k in rows if k[0][1] == job)
                if version < below]


_EVENTS: dict[tuple[str, int], Any] = {}  # (job, version) -> event: the decoder of the model's history rows


def _remember(stream: list[Any]) -> None:
    for e in stream:
        if not isinstance(e, ev.CommandRejected):
            _EVENTS[(e.job_id, e.version)] = e


def _stream(hs, seed: int) -> tuple[random.Random, list[Any]]:
    """The jobs' histories interleaved as one partition would carry them, remembered for the history rows,
    and the random source that cut them, for the test's own choices."""
    rnd = random.Random(seed)
    stream = _interleaved(list(hs), rnd)
    _remember(stream)
    return rnd, stream


jobs = st.lists(st.sampled_from(["k1", "k2", "k3"]), min_size=1, max_size=3, unique=True).flatmap(
    lambda keys: st.tuples(*(histories(key=k) for k in keys)))
batch_sizes = st.lists(st.integers(1, 15), min_size=1, max_size=6)


@FAST
@given(jobs, batch_sizes, st.integers(0, 2**32))
def test_batches_leave_the_rows_of_one_by_one_projection(hs, sizes, seed):
    rnd, stream = _stream(hs, seed)
    t = Tables()
    p = _Projector(t)
    for a, b in _cuts(len(stream), sizes):
        ops = p.batch(stream[a:b])
        rnd.shuffle(ops)  # written concurrently: any order
        t.apply_all(ops)
    assert t.snapshot() == _one_by_one(stream)


@FAST
@given(jobs, batch_sizes, batch_sizes, st.integers(0, 2**32))
def test_a_projector_dying_mid_batch_and_one_starting_from_nothing_leave_the_same_rows(hs, sizes, sizes2, seed):
    # The first projector writes its batches, then dies with part of one batch's writes applied, its offsets
    # not committed. Its replacement starts at the last committed batch with an empty cache (jobs met
    # mid-history restored from the history rows), cuts its batches elsewhere, and redelivers what the
    # first had written.
    rnd, stream = _stream(hs, seed)
    cuts = _cuts(len(stream), sizes)
    dies_in = rnd.randrange(len(cuts))
    t = Tables()
    first = _Projector(t)
    for a, b in cuts[:dies_in]:
        t.apply_all(first.batch(stream[a:b]))
    a, b = cuts[dies_in]
    partial = first.batch(stream[a:b])
    t.apply_all(op for op in partial if rnd.random() < 0.5)
    second = _Projector(t)
    for c, d in _cuts(len(stream) - a, sizes2):
        ops = second.batch(stream[a + c:a + d])
        rnd.shuffle(ops)
        t.apply_all(ops)
    assert t.snapshot() == _one_by_one(stream)


@FAST
@given(jobs, batch_sizes, st.integers(0, 2**32))
def test_a_redelivered_batch_changes_nothing(hs, sizes, seed):
    # A commit that failed: the same projector (its cache warm) gets the records again.
    rnd, stream = _stream(hs, seed)
    t = Tables()
    p = _Projector(t)
    for a, b in _cuts(len(stream), sizes):
        t.apply_all(p.batch(stream[a:b]))
        if rnd.random() < 0.3:
            t.apply_all(p.batch(stream[a:b]))
    assert t.snapshot() == _one_by_one(stream)


def _by_row(ops: list[pr.RowOp]) -> dict:
    return {(op.row_id, op.delete): (op.timestamp, dict(op.values)) for op in ops}


@FAST
@given(jobs, st.integers(0, 2**32))
def test_job_rows_are_what_coalesce_makes_of_the_per_event_writes(hs, seed):
    stream = _interleaved(list(hs), random.Random(seed))
    states: dict[str, Any] = {}
    per_event: list[pr.RowOp] = []
    for e in stream:
        state, ops = pj.project(states.get(e.job_id), e, _env(e))
        if not isinstance(e, ev.CommandRejected):
            states[e.job_id] = state
        per_event += ops
    batched, final = pj.project_batch([(e, _env(e)) for e in stream], {}.get)
    job_scoped = [op for op in batched if op.table in pr.JOB_SCOPED]
    assert _by_row(job_scoped) == _by_row(pj.coalesce([op for op in per_event if op.table in pr.JOB_SCOPED]))
    assert len(job_scoped) == len(_by_row(job_scoped))  # one write per row (and one delete)
    assert final == {job: states[job] for job in final}
    assert set(final) == {e.job_id for e in stream if not isinstance(e, ev.CommandRejected)}


_cells = st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from([None, 1, 2])), max_size=3, unique_by=lambda c: c[0])


@st.composite
def _ops(draw: st.DrawFn, table: str) -> list[pr.RowOp]:
    """Any writes and deletes of two rows of one table, in any order, timestamps colliding often."""
    out = []
    for _ in range(draw(st.integers(0, 12))):
        key = (("id", draw(st.sampled_from(["r1", "r2"]))),)
        ts = draw(st.integers(1, 6))
        if table != pr.WORKERS and draw(st.integers(0, 4)) == 0:
            out.append(pr.RowOp(table, key, (), ts, delete=True))
        else:
            out.append(pr.RowOp(table, key, tuple(draw(_cells)), ts))
    return out


@FAST
@given(_ops(pr.POOL_JOBS))
def test_batch_rows_merge_job_rows_as_coalesce_does(ops):
    rows = pj.BatchRows()
    rows.extend(ops)
    assert _by_row(rows.ops()) == _by_row(pj.coalesce(ops))


@FAST
@given(_ops(pr.WORKERS), st.randoms(use_true_random=False))
def test_batch_rows_leave_each_worker_cell_as_the_separate_writes_would(ops, rnd):
    rows = pj.BatchRows()
    rows.extend(ops)
    merged = rows.ops()
    rnd.shuffle(merged)
    assert Tables().apply_all(merged).snapshot() == Tables().apply_all(ops).snapshot()


def test_a_jobs_heartbeats_in_one_batch_are_one_write_per_row_but_every_history_row():
    d = Driver()
    d.submit()
    d.grant(worker="w1")
    before = fold(d.history)
    start = len(d.history)
    for i in range(1, 11):
        d.now += 5000
        d.progress(5.0 * i, i)
        d.now += 5000
        d.renew()
    batch = d.history[start:]
    ops, states = pj.project_batch([(e, _env(e)) for e in batch], {d.job_id: before}.get)
    tables: dict[str, int] = {}
    for op in ops:
        tables[op.table] = tables.get(op.table, 0) + 1
    assert tables == {pr.EVENTS: 20, pr.JOBS: 1, pr.TENANT_JOBS: 1, pr.POOL_JOBS: 1, pr.TENANT_LIVE: 1, pr.ATTEMPTS: 1,
                      pr.WORKERS: 1}
    job = next(op for op in ops if op.table == pr.JOBS)
    assert job.timestamp == batch[-1].version
    assert dict(job.values)["step"] == 10 and dict(job.values)["progress_pct"] == 50.0
    worker = next(op for op in ops if op.table == pr.WORKERS)
    assert dict(worker.values) == {"last_seen_at": batch[-1].at_ms}
    assert states[d.job_id] == fold(d.history)


def test_worker_cells_at_one_timestamp_with_different_values_are_left_to_cassandra():
    a = pr.RowOp(pr.WORKERS, (("worker_id", "w"),), (("status", "busy"), ("current_job_id", "x")), 7)
    b = pr.RowOp(pr.WORKERS, (("worker_id", "w"),), (("status", "busy"), ("current_job_id", "y")), 7)
    rows = pj.BatchRows()
    rows.extend([a, b])
    for order in ([a, b], [b, a]):
        assert Tables().apply_all(rows.ops()).snapshot() == Tables().apply_all(order).snapshot()


def test_summary_lines_are_unchanged_by_the_field_cache():
    # The salient fields are computed once per event type; the line is what the field walk gave.
    from dataclasses import fields

    d = Driver()
    d.submit()
    d.grant()
    d.progress(12.5, 3)
    d.checkpoint(3, 12.5)
    d.fail()
    for e in d.history:
        # A RenderSpec's fields stand where the flat JobSubmitted had them (projection._flat_names).
        values = {f.name: getattr(e, f.name) for f in fields(e)}
        values.update(getattr(e, "spec").flat() if "spec" in values else {})
        names = pj._flat_names(type(e)) if "spec" in values else [f.name for f in fields(e)]
        parts = [f"{name}={values[name]}" for name in names
                 if name not in pj._HEADER and name not in pj._QUIET
                 and values[name] is not None and values[name] != ()
                 and not name.startswith(("backoff_", "poison_", "max_", "keep_"))]
        expected = type(e).__name__ + (f" {' '.join(parts)}" if parts else "")
        assert pj.summary(e) == (expected if len(expected) <= 240 else expected[:237] + "...")
    # The history line of a JobSubmitted reads as it did when the spec's fields were flat.
    assert pj.summary(d.history[0]) == (
        "JobSubmitted tenant=acme model=tiny-t2v gpu_type=h100 pool=tiny-t2v@h100 duration_s=4.0 resolution=512x512 "
        "fps=8 seed=7 num_steps=20 priority=0 dag_policy=fail_fast stuck_steps=10 stuck_min_ms=120000")
