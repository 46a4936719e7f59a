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


def _observe(m: SchedulerMetrics, d: Driver, events: tuple) -> None:
    """What the scheduler does per command: each event with the state before the command and after it."""
    before, after = d.history_before, d.state
    for e in events:
        if isinstance(e, ev.JobLeased):
            m.observe_lease(before, e)
        elif isinstance(e, (ev.LeaseExpired, ev.LeaseReleased)):
            m.observe_lease_end(before, e)
        elif isinstance(e, ev.JobSucceeded):
            m.observe_success(after, e.at_ms)


class Recorded(Driver):
    def send(self, command, **kw):  # type: ignore[override]
        self.history_before = self.state
        return super().send(command, **kw)


def test_pickup_is_the_first_lease_only_and_recovery_is_preemption_to_the_next_lease() -> None:
    m, d = SchedulerMetrics(), Recorded()
    d.submit(priority=4)
    _observe(m, d, d.grant())  # picked up at once
    d.checkpoint(step=5, pct=25.0)
    d.progress(40.0, step=8)
    _observe(m, d, d.expire())  # the worker vanished at step 8, checkpoint at 5
    d.now += 7_000
    _observe(m, d, d.grant(worker="w2"))  # attempt is still 1: not a second pickup
    d.release(reason="preempted")
    pool = d.s.pool
    text = generate_latest(m.registry).decode()
    assert f'spotreel_scheduler_queue_wait_seconds_count{{pool="{pool}",tier="4"}} 1.0' in text
    assert f'spotreel_scheduler_preemptions_total{{cause="lease_expired",pool="{pool}"}} 1.0' in text
    assert f'spotreel_scheduler_preempted_steps_lost_total{{pool="{pool}"}} 3.0' in text
    assert f'spotreel_scheduler_preemption_recovery_seconds_sum{{pool="{pool}"}} 7.0' in text


def test_a_release_after_a_notice_is_a_preemption_an_unclaimed_one_is_not() -> None:
    m, d = SchedulerMetrics(), Recorded()
    d.submit()
    d.grant()
    _observe(m, d, d.release(reason="preempted"))
    d.grant(worker="w2")
    _observe(m, d, d.release(reason="unclaimed"))
    text = generate_latest(m.registry).decode()
    assert f'spotreel_scheduler_preemptions_total{{cause="released",pool="{d.s.pool}"}} 1.0' in text
    assert 'cause="lease_expired"' not in text


def test_completion_and_generation_of_a_succeeded_job() -> None:
    m, d = SchedulerMetrics(), Recorded()
    d.submit(priority=1)
    d.grant()
    d.now += 20_000
    d.progress(50.0, step=10)
    d.now += 25_000  # within the renewed lease
    _observe(m, d, d.complete())
    job = d.s
    text = generate_latest(m.registry).decode()
    labels = f'pool="{job.pool}",tier="1"'
    assert f"spotreel_scheduler_completion_seconds_sum{{{labels}}} 45.0" in text
    assert f'spotreel_scheduler_generation_seconds_sum{{pool="{job.pool}"}} {job.render_ms / 1000}' in text
    assert job.render_ms > 0


class ObservedDriver(Driver):
    """A Driver whose every decision is shown to the scheduler's metrics as pipeline._take shows it."""

    def __init__(self, metrics: SchedulerMetrics, **kwargs) -> None:
        super().__init__(**kwargs)
        self.metrics = metrics

    def send(self, command, *, at=None, advance=0):
        before = self.state
        out = super().send(command, at=at, advance=advance)
        if out and self.state is not None:
            self.metrics.observe_job(before, self.state)
        return out


def _ended(text: str, pool: str, tenant: str, outcome: str) -> float:
    line = f'spotreel_scheduler_jobs_ended_total{{outcome="{outcome}",pool="{pool}",tenant="{tenant}"}} '
    found = [ln for ln in text.splitlines() if ln.startswith(line)]
    assert found, f"no {line} in\n{text}"
    return float(found[0].rsplit(" ", 1)[1])


def test_jobs_by_terminal_outcome_pool_and_tenant_counted_once_each() -> None:
    m = SchedulerMetrics()
    done = ObservedDriver(m)
    done.send(submit("k-done"))
    pool = done.s.pool
    text = generate_latest(m.registry).decode()
    for outcome in ("succeeded", "failed", "dead_lettered", "cancelled"):  # there at 0 from the first state
        assert _ended(text, pool, "acme", outcome) == 0
    done.grant()
    done.complete()
    done.complete()  # a late duplicate is rejected: no second count
    failed = ObservedDriver(m)
    failed.send(submit("k-failed"))
    failed.grant()
    failed.fail(retryable=False)
    dead = ObservedDriver(m)
    dead.send(submit("k-dead", tenant="zeta", max_attempts=1))
    dead.grant()
    dead.fail()
    cancelled = ObservedDriver(m)
    cancelled.send(submit("k-cancel"))
    cancelled.cancel()
    cancelled.cancel()
    text = generate_latest(m.registry).decode()
    assert [_ended(text, pool, "acme", o) for o in ("succeeded", "failed", "dead_lettered", "cancelled")] == \
        [1, 1, 0, 1]
    assert _ended(text, pool, "zeta", "dead_lettered") == 1 and _ended(text, pool, "zeta", "succeeded") == 0
