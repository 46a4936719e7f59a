"""Run-at timers are durable: a scheduler killed with kill -9 while its timers fall due is replaced, and every
job still fires exactly once, late by at most the recovery time (kill to the new owner's first event) plus
the bound of the undisturbed run (tests/integration/test_scheduler_timers_at_volume.py)."""

from __future__ import annotations

import uuid

from tests.integration.schedkit import drop_topics, make_topics, scheduler_settings
from tests.integration.timerkit import run_at_volume

LATE_BOUND_MS = 5_000


def test_timers_due_while_the_scheduler_is_down_fire_once_after_recovery(tmp_path) -> None:
    settings = scheduler_settings("tk" + uuid.uuid4().hex[:8], partitions=3)
    make_topics(settings)
    try:
        run = run_at_volume(settings, tmp_path, spread=400, spread_s=4.0, burst=200, kill_at_s=1.0,
                            settle_s=2.0, timeout_s=90.0)
    finally:
        drop_topics(settings)
    assert run.scheduled == run.jobs == 600, run.summary()
    assert run.lost == 0 and run.twice == 0, run.summary()
    assert run.recovery_s is not None and run.late_after_kill_ms, run.summary()
    assert min(run.lateness_ms) >= 0, f"a timer fired before its due time: {run.summary()}"
    assert max(run.lateness_ms) <= run.recovery_s * 1000 + LATE_BOUND_MS, run.summary()
