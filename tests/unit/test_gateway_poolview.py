"""Summing the scheduler partitions' pool-stats records into one pool load for the ETA."""

from __future__ import annotations

from dataclasses import dataclass

from spotreel.domain import events as ev
from spotreel.services.gateway.public.poolview import aggregate

NOW = 1_700_000_000_000


def rec(partition: int, queued: int, leased: int, idle: int = 0, run_ms: float = 0.0, at_ms: int = NOW):
    return ev.PoolStats(pool="tiny-t2v@any", partition=partition, at_ms=at_ms, queued=queued, leased=leased,
                        oldest_wait_ms=0, idle_workers=idle, mean_run_ms=run_ms)


def test_queued_and_busy_add_up_idle_workers_are_not_double_counted():
    load = aggregate([rec(0, 3, 2, idle=1, run_ms=60_000), rec(1, 1, 1, idle=1, run_ms=30_000)], NOW, 60_000)
    assert (load.queued, load.workers_active, load.workers_idle) == (4, 4, 1)
    # Weighted by busy workers: (60 s * 2 + 30 s * 1) / 3.
    assert load.mean_generation_seconds == 50.0


def test_no_measurement_gives_no_mean_and_stale_partitions_are_ignored():
    load = aggregate([rec(0, 2, 0), rec(1, 9, 9, run_ms=10_000, at_ms=NOW - 600_000)], NOW, 60_000)
    assert (load.queued, load.workers_active, load.mean_generation_seconds) == (2, 0, None)
    assert aggregate([rec(0, 1, 1, at_ms=NOW - 600_000)], NOW, 60_000) is None
    assert aggregate([], NOW, 60_000) is None


def test_fields_the_scheduler_reports_directly_win():
    @dataclass
    class Richer:
        pool: str = "p"
        partition: int = 0
        at_ms: int = NOW
        queued: int = 5
        leased: int = 2
        idle_workers: int = 1
        mean_run_ms: float = 99_000.0
        workers_active: int = 7
        mean_generation_ms: float = 20_000.0

    load = aggregate([Richer()], NOW, 60_000)
    assert (load.workers_active, load.workers_idle, load.mean_generation_seconds) == (7, 1, 20.0)


def test_warm_idle_workers_are_the_largest_report_and_unknown_when_nobody_reports():
    a, b = rec(0, 1, 0, idle=3), rec(1, 0, 0, idle=3)
    assert aggregate([a, b], NOW, 60_000).workers_idle_warm is None
    warm = [ev.PoolStats(**{**a.__dict__, "warm_idle_workers": 1}), ev.PoolStats(**{**b.__dict__, "warm_idle_workers": 2})]
    load = aggregate(warm, NOW, 60_000)
    assert (load.workers_idle, load.workers_idle_warm) == (3, 2)
