"""The services' metric registries: no `_created` gauge families, and the scheduler's pickup histogram."""

from __future__ import annotations

from prometheus_client import generate_latest

from spotreel.services.gateway.metrics import Metrics as GatewayMetrics
from spotreel.services.scheduler.metrics import Metrics as SchedulerMetrics
from spotreel.services.webhooks.metrics import WebhookMetrics
from spotreel.domain import events as ev
from tests.unit.jobkit import Driver, leased_job, submit


def test_no_created_series_in_any_registry() -> None:
    gw, sched, hooks = GatewayMetrics.create(), SchedulerMetrics(), WebhookMetrics.create()
    gw.commands.labels("SubmitJob").inc()
    gw.latency.labels("GET", "/v1/videos", "200").observe(0.01)
    sched.lease_expirations.labels("p", "worker_lost").inc()
    hooks.deliveries.labels("delivered").inc()
    for registry in (gw.registry, sched.registry, hooks.registry):
        text = generate_latest(registry).decode()
        assert "_total " in text or "_total{" in text
        assert "_created" not in text, text


def test_queue_wait_of_a_first_lease_by_pool_and_tier() -> None:
    d = Driver()
    d.send(submit(priority=2))
    job = d.state
    assert job is not None
    m = SchedulerMetrics()
    m.observe_pickup(job, job.submitted_at_ms + 12_500)
    text = generate_latest(m.registry).decode()
    labels = f'pool="{job.pool}",tier="2"'
    assert f'spotreel_scheduler_queue_wait_seconds_bucket{{le="10.0",{labels}}} 0.0' in text
    assert f'spotreel_scheduler_queue_wait_seconds_bucket{{le="20.0",{labels}}} 1.0' in text
    assert f"spotreel_scheduler_queue_wait_seconds_sum{{{labels}}} 12.5" in text


def test_lease_expiries_by_cause() -> None:
    d = leased_job()
    before = d.state
    assert before is not None
    expired = next(e for e in d.expire() if isinstance(e, ev.LeaseExpired))
    m = SchedulerMetrics()
    m.observe_expiry(before, expired)
    text = generate_latest(m.registry).decode()
    assert f'spotreel_scheduler_lease_expirations_total{{cause="worker_lost",pool="{before.pool}"}} 1.0' in text


def test_a_lease_held_to_confirm_a_cancel_expires_as_confirm_timeout() -> None:
    d = leased_job()
    d.cancel()
    before = d.state
    assert before is not None and before.lease is not None
    expired = next(e for e in d.expire() if isinstance(e, ev.LeaseExpired))
    assert expired.preemptions == before.preemptions
    m = SchedulerMetrics()
    m.observe_expiry(before, expired)
    text = generate_latest(m.registry).decode()
    assert f'spotreel_scheduler_lease_expirations_total{{cause="confirm_timeout",pool="{before.pool}"}} 1.0' in text
