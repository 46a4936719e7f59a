"""The pulse renews the lease with progress reports and heartbeats only when no report went out in time."""

from __future__ import annotations

import threading
import time

from spotreel.worker.pulse import Position, Pulse
from spotreel.domain.spec import RenderSpec
from spotreel.worker.transport import WorkerLease, Verdict


class CountingTransport:
    """Records the renewals the pulse sends; every one is accepted."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def _note(self, kind: str) -> Verdict:
        with self._lock:
            self.calls.append(kind)
        return Verdict(accepted=True)

    def heartbeat(self, lease: WorkerLease) -> Verdict:
        return self._note("heartbeat")

    def progress(self, lease: WorkerLease, step: int, progress_pct: float, phase: str) -> Verdict:
        return self._note("progress")


def _lease(ttl_ms: int = 30_000) -> WorkerLease:
    return WorkerLease(job_id="j" + "0" * 32, epoch=1, worker_id="w", attempt=1, lease_ttl_ms=ttl_ms,
                 lease_expires_at_ms=0, pool="tiny-t2v@any", gpu_type="cpu",
                 spec=RenderSpec(model="tiny-t2v", prompt="a fox", duration_s=1.0, resolution="32x32", fps=8, seed=1,
                                 num_steps=4))


def _run(heartbeat_s: float, progress_s: float, seconds: float) -> list[str]:
    transport = CountingTransport()
    pulse = Pulse(transport, _lease(), heartbeat_s=heartbeat_s, progress_s=progress_s,  # type: ignore[arg-type]
                  start=Position(0, 0.0, "denoising")).start()
    time.sleep(seconds)
    pulse.stop()
    return transport.calls


def test_reports_more_often_than_heartbeats_leave_no_heartbeat_to_send() -> None:
    calls = _run(heartbeat_s=0.2, progress_s=0.05, seconds=1.0)
    assert calls.count("progress") >= 5
    assert calls.count("heartbeat") == 0


def test_heartbeats_fill_the_gaps_when_reports_are_rarer() -> None:
    calls = _run(heartbeat_s=0.05, progress_s=0.4, seconds=1.0)
    assert calls.count("progress") >= 1
    assert calls.count("heartbeat") >= 5


class BehindTransport(CountingTransport):
    """A control plane that is behind: every answer asks for `quiet_s` of silence."""

    def __init__(self, quiet_s: float) -> None:
        super().__init__()
        self.quiet_s = quiet_s
        self.times: list[float] = []

    def _note(self, kind: str) -> Verdict:
        super()._note(kind)
        self.times.append(time.monotonic())
        return Verdict(accepted=False, pending=True, renew_in_s=self.quiet_s)


def test_a_control_plane_that_is_behind_gets_fewer_renewals() -> None:
    transport = BehindTransport(quiet_s=0.4)
    pulse = Pulse(transport, _lease(), heartbeat_s=0.1, progress_s=0.05,  # type: ignore[arg-type]
                  start=Position(0, 0.0, "denoising")).start()
    time.sleep(1.3)
    pulse.stop()
    # Without the hint: about 25 reports in 1.3 s; with it, one every 0.4 s.
    assert 2 <= len(transport.calls) <= 5, transport.calls
    gaps = [b - a for a, b in zip(transport.times, transport.times[1:])]
    assert all(g >= 0.38 for g in gaps), gaps


def test_a_hint_longer_than_a_third_of_the_holders_own_ttl_is_cut_to_it() -> None:
    """The pacer (a gateway configured for 30 s leases) may not know that this lease was granted with a
    shorter TTL; a holder that obeyed a 10 s hint on a 0.9 s lease would lose it."""
    from spotreel.domain.leases import quiet_s

    assert quiet_s(10.0, 900) == 0.3 and quiet_s(0.1, 900) == 0.1 and quiet_s(10.0, 30_000) == 10.0
    transport = BehindTransport(quiet_s=10.0)
    pulse = Pulse(transport, _lease(ttl_ms=900), heartbeat_s=0.05, progress_s=0.05,  # type: ignore[arg-type]
                  start=Position(0, 0.0, "denoising")).start()
    time.sleep(1.0)
    pulse.stop()
    assert len(transport.calls) >= 3, transport.calls  # a 10 s pause would have left one renewal


def test_the_pacing_rule_only_slows_down_when_verdicts_are_slow() -> None:
    from spotreel.domain.leases import renew_in_s

    assert renew_in_s(0.05, 30_000) is None
    assert renew_in_s(1.5, 30_000) == 10.0
    assert renew_in_s(None, 30_000) == 10.0  # no verdict in time at all
    assert renew_in_s(0.5, 30_000, slow_s=0.2) == 10.0


class SlowAnswers(BehindTransport):
    """Each answer takes `rtt` seconds to come back and asks for `quiet_s` of silence."""

    def __init__(self, quiet_s: float, rtt: float) -> None:
        super().__init__(quiet_s)
        self.rtt = rtt

    def _note(self, kind: str) -> Verdict:
        verdict = super()._note(kind)
        time.sleep(self.rtt)
        return verdict


def test_the_quiet_time_counts_from_the_send_not_from_the_answer() -> None:
    transport = SlowAnswers(quiet_s=0.4, rtt=0.3)
    pulse = Pulse(transport, _lease(), heartbeat_s=0.1, progress_s=0.05,  # type: ignore[arg-type]
                  start=Position(0, 0.0, "denoising")).start()
    time.sleep(1.5)
    pulse.stop()
    gaps = [b - a for a, b in zip(transport.times, transport.times[1:])]
    # Sent every 0.4 s, not every rtt + 0.4 = 0.7 s.
    assert gaps and all(0.38 <= g < 0.6 for g in gaps), gaps


def test_every_renewal_is_counted_by_kind_and_outcome_in_the_worker_metrics() -> None:
    from prometheus_client import generate_latest

    from spotreel.worker.metrics import WorkerMetrics
    from spotreel.worker.transport import LeaseLost

    class LostAfterTwo(CountingTransport):
        def progress(self, lease: WorkerLease, step: int, progress_pct: float, phase: str) -> Verdict:
            verdict = self._note("progress")
            if len(self.calls) > 2:
                raise LeaseLost("lease_expired")
            return verdict

    metrics = WorkerMetrics()
    lease = _lease()
    pulse = Pulse(LostAfterTwo(), lease, heartbeat_s=10.0, progress_s=0.05,  # type: ignore[arg-type]
                  start=Position(0, 0.0, "denoising"),
                  on_renewal=lambda kind, outcome: metrics.renewal(lease.pool, kind, outcome))
    pulse._run()  # on this thread: reports until the third finds the lease gone
    text = generate_latest(metrics.registry).decode()
    labels = 'pool="tiny-t2v@any"'
    assert f'spotreel_worker_lease_renewals_total{{kind="progress",outcome="accepted",{labels}}} 2.0' in text
    assert f'spotreel_worker_lease_renewals_total{{kind="progress",outcome="lost",{labels}}} 1.0' in text
