"""The services' metric registries: no `_created` gauge families, and the scheduler's pickup histogram."""

from __future__ import annotations

from prometheus_client import generate_latest

from spotreel.services.gateway.metrics import Metrics as GatewayMetrics
from spotreel.services.scheduler.metrics import Metrics as SchedulerMetrics
from spotreel.services.webhooks.metrics import WebhookMetrics
from tests.unit.jobkit import Driver, submit


def test_no_created_series_in_any_registry() -> None:
    gw, sched, hooks = GatewayMetrics.create(), SchedulerMetrics(), WebhookMetrics.create()
    gw.commands.labels("SubmitJob").inc()
    gw.latency.labels("GET", "/v1/videos", "200").observe(0.01)
    sched.lease_expirations.inc()
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
