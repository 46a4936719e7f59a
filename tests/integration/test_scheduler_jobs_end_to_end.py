"""Short jobs end to end over Kafka at a CI-sized rate: submitted, leased by simulated zero-length workers and
completed, each job exactly once (counted from the events topic), with two scheduler processes sharing the
partitions. No timing is asserted; the figures are bench/e2e_jobs_bench.py's (bench/README.md)."""

from __future__ import annotations

import uuid

from tests.integration.e2ekit import run_jobs
from tests.integration.schedkit import drop_topics, make_topics, scheduler_settings


def test_every_short_job_is_completed_exactly_once_across_two_scheduler_processes(tmp_path) -> None:
    settings = scheduler_settings("ej" + uuid.uuid4().hex[:8], partitions=4)
    make_topics(settings)
    try:
        run = run_jobs(settings, tmp_path, schedulers=2, rates=[60.0], stage_s=5.0, workers=20, drain_s=30.0)
    finally:
        drop_topics(settings)
    summary = run.summary()
    assert run.produced == len(run.submitted) == 300, summary
    assert set(run.done) == set(run.submitted), summary
    assert run.succeeded_twice == 0, summary
    assert all(run.leased[j] <= run.done[j] for j in run.done), summary
