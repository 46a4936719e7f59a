"""Wasted GPU-seconds: the time of an ended lease after its newest checkpoint when it ended without success
(JobState.wasted_ms, folded from the events), per tenant and pool in the scheduler's ledger and its usage
reports (GET /v1/usage, `spotreel usage`, the tenant_wasted_gpu_seconds gauge)."""

from __future__ import annotations

import pytest

from spotreel.domain import commands as c
from spotreel.domain import ids
from spotreel.domain.evolve import fold
from spotreel.services.scheduler.fairshare import TenantLedger
from tests.unit.jobkit import POOL, TTL, Driver, leased_job

pytestmark = pytest.mark.unit


def _checkpoint(d: Driver, step: int, advance: int) -> None:
    epoch, worker = d.lease()
    d.send(c.RecordCheckpoint(d.next_id("ck"), d.job_id, epoch, worker, ids.checkpoint_key(d.job_id, epoch, step),
                              step, step * 5.0, "sum", 100), advance=advance)


def _progress(d: Driver, step: int, advance: int) -> None:
    epoch, worker = d.lease()
    d.send(c.ReportProgress(d.next_id("p"), d.job_id, epoch, worker, step, step * 5.0, "denoising"), advance=advance)


def test_a_lost_lease_wastes_what_followed_its_newest_checkpoint_and_a_success_wastes_nothing() -> None:
    d = leased_job()
    _checkpoint(d, 4, advance=10_000)  # 10 s into the lease
    d.expire(advance=TTL)  # the worker went silent: the 30 s after that checkpoint are redone
    assert (d.s.wasted_ms, d.s.render_ms) == (30_000, 40_000)
    d.grant("w2")
    _checkpoint(d, 8, advance=5_000)
    d.release(reason="preempted")  # a checkpoint just before the release: nothing more lost
    assert d.s.wasted_ms == 30_000
    d.grant("w3")
    _progress(d, 9, advance=7_000)
    d.fail()  # a failed attempt with no checkpoint of its own: its 7 s are lost
    assert d.s.wasted_ms == 37_000
    d.activate(advance=600_000)
    d.grant("w4")
    _progress(d, 12, advance=9_000)
    d.complete()
    assert d.s.wasted_ms == 37_000 and d.s.render_ms == 40_000 + 5_000 + 7_000 + 9_000
    assert fold(d.history).wasted_ms == 37_000  # the fold of the history gives the same


def test_the_ledger_counts_waste_per_tenant_and_pool_and_reports_it() -> None:
    d = leased_job()
    d.expire(advance=TTL)
    ledger = TenantLedger(half_life_ms=None)
    ledger.observe(None, d.s)  # a rebuild counts the job's whole history
    assert ledger.wasted_s == {"acme": 30.0} and ledger.wasted_by_pool == {("acme", POOL): 30.0}
    report = ledger.report("acme", 0, d.now)
    assert (report.used_gpu_seconds, report.wasted_gpu_seconds) == (30.0, 30.0)
    before = d.s
    d.grant("w2")
    d.complete()
    ledger.observe(before, d.s)
    assert ledger.wasted_s == {"acme": 30.0}
