"""The worker's stuck rule (worker/stuck.py): the allowance from its own steps, and the pulse reporting a run
whose step stopped, then renewing no more."""

from __future__ import annotations

import threading
import time

import pytest

from spotreel.worker.pulse import Position, Pulse
from spotreel.worker.render_loop import _test_hang_spec
from spotreel.worker.stuck import StepWatch
from spotreel.worker.transport import WorkerLease, Verdict
from tests.unit.test_worker_pulse import CountingTransport, _lease

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_floor_applies_until_a_step_advanced_then_n_times_the_mean_step() -> None:
    clock = Clock()
    w = StepWatch(10, 5.0, start_step=3, clock=clock)
    assert w.expected_s() is None and w.allowance_s() == 5.0
    clock.t += 5.0
    assert w.overdue() is None
    clock.t += 0.1
    assert "after step 3" in (w.overdue() or "")
    w.advanced(7)  # 4 steps in 5.1 s
    assert w.expected_s() == pytest.approx(5.1 / 4) and w.allowance_s() == pytest.approx(12.75)
    clock.t += 12.0
    assert w.overdue() is None
    w.advanced(7)  # the same step again is no advance
    clock.t += 1.0
    assert "after step 7" in (w.overdue() or "")


def test_finishing_phases_and_zero_steps_are_never_stuck() -> None:
    clock = Clock()
    w = StepWatch(10, 1.0, start_step=0, clock=clock)
    w.finishing()
    clock.t += 10**6
    assert w.overdue() is None
    assert StepWatch(0, 1.0, 0, clock=clock).overdue() is None


class FailRecording(CountingTransport):
    def fail(self, lease: WorkerLease, error_code: str, message: str, retryable: bool = True,
             invalid_checkpoint_key: str | None = None) -> Verdict:
        self._note(f"fail:{error_code}:{retryable}")
        return Verdict(accepted=True)


def test_the_pulse_reports_a_stuck_run_once_and_stops_renewing() -> None:
    transport = FailRecording()
    watch = StepWatch(10, 0.3, start_step=0)
    told = threading.Event()
    pulse = Pulse(transport, _lease(), heartbeat_s=0.05, progress_s=0.05,  # type: ignore[arg-type]
                  start=Position(0, 0.0, "denoising"), watch=watch, on_stuck=lambda why: told.set()).start()
    assert told.wait(5.0)
    assert pulse.lost.is_set() and pulse.lost_reason == "stuck" and "after step 0" in pulse.stuck_detail
    renewals = len(transport.calls)
    time.sleep(0.3)
    pulse.stop()
    assert transport.calls.count("fail:stuck:True") == 1 and transport.calls[-1] == "fail:stuck:True"
    assert len(transport.calls) == renewals  # nothing sent after the report


def test_a_run_whose_steps_advance_is_not_stuck() -> None:
    transport = FailRecording()
    watch = StepWatch(10, 0.3, start_step=0)
    pulse = Pulse(transport, _lease(), heartbeat_s=0.05, progress_s=0.05,  # type: ignore[arg-type]
                  start=Position(0, 0.0, "denoising"), watch=watch).start()
    for step in range(1, 12):
        time.sleep(0.1)
        watch.advanced(step)
    pulse.stop()
    assert not pulse.lost.is_set() and not any(c.startswith("fail") for c in transport.calls)


def test_the_test_only_hang_hook_spec() -> None:
    assert _test_hang_spec(None) is None and _test_hang_spec("") is None
    assert _test_hang_spec("3") == (3, None) and _test_hang_spec("3:25") == (3, 25.0)
