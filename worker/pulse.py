"""The lease's heartbeat and progress reports, on their own clock in a background thread.

Denoising steps can take milliseconds (tiny model) or a minute (a full model on a slow GPU), so liveness
must not depend on step length: this thread reports the run's latest progress every `progress_s` and
heartbeats whenever `heartbeat_s` passed without a report, whatever the run is doing. A progress report
renews the lease exactly as a heartbeat does (ProgressReported carries the new expiry), so with reports
every 5 s and heartbeats every 10 s a running job sends reports only: a third fewer requests per worker. It also carries the control plane's answers back:
the lease was lost (stop writing), a cancel was requested, or a drain (pause) was requested; and, when the
control plane is behind, how long to stay quiet (`renew_in_s`): both kinds of report wait, so a slow control
plane gets less traffic instead of more.

Because it renews whatever the run does, it also watches that the run's steps advance (`watch`, stuck.py):
once they stop for too long it reports the run stuck (FailJob, error_code "stuck", retryable), stops
renewing, and calls `on_stuck`.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable

from spotreel.domain.leases import quiet_s
from spotreel.worker.stuck import StepWatch
from spotreel.worker.transport import WorkerLease, LeaseLost, Transport, TransportError, Verdict

log = logging.getLogger("spotreel.worker.pulse")


@dataclass(frozen=True)
class Position:
    step: int
    progress_pct: float
    phase: str


class Pulse:
    def __init__(self, transport: Transport, lease: WorkerLease, heartbeat_s: float, progress_s: float,
                 start: Position, watch: StepWatch | None = None,
                 on_stuck: Callable[[str], None] | None = None,
                 on_renewal: Callable[[str, str], None] | None = None) -> None:
        self.transport = transport
        self.lease = lease
        self.heartbeat_s = heartbeat_s
        self.progress_s = progress_s
        self._position = start
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.lost = threading.Event()
        self.cancel = threading.Event()
        self.drain = threading.Event()
        self.lost_reason = ""
        self.last_contact = time.monotonic()
        # The control plane asked for no renewal before this (monotonic): it is behind (Verdict.renew_in_s).
        self.quiet_until = 0.0
        self.watch = watch
        self.on_stuck = on_stuck
        # (kind, outcome) of every renewal sent: the worker's metrics (metrics.py) count them.
        self.on_renewal = on_renewal or (lambda kind, outcome: None)
        self.stuck_detail = ""
        self._thread = threading.Thread(target=self._run, name=f"pulse-{lease.job_id[:10]}", daemon=True)

    def start(self) -> "Pulse":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(30)

    def move(self, step: int, progress_pct: float, phase: str) -> None:
        with self._lock:
            self._position = Position(step, round(min(100.0, max(0.0, progress_pct)), 3), phase)

    @property
    def position(self) -> Position:
        with self._lock:
            return self._position

    def heed(self, verdict: Verdict, sent_at: float | None = None) -> None:
        """Take a verdict's instructions (also for verdicts of commands the run sent itself). A pacing hint
        counts from when the command was sent (`sent_at`, monotonic), not from when its answer came."""
        self.last_contact = time.monotonic()
        if verdict.renew_in_s:
            start = self.last_contact if sent_at is None else sent_at
            pause = quiet_s(float(verdict.renew_in_s), self.lease.lease_ttl_ms)
            self.quiet_until = max(self.quiet_until, start + pause)
        if verdict.cancel:
            self.cancel.set()
        if verdict.drain:
            self.drain.set()

    def mark_lost(self, reason: str) -> None:
        self.lost_reason = self.lost_reason or reason
        self.lost.set()

    def _run(self) -> None:
        now = time.monotonic()
        next_beat, next_report = now + self.heartbeat_s, now + min(self.progress_s, 1.0)
        while not self._stop.is_set() and not self.lost.is_set():
            wake = min(next_beat, next_report) if self.watch is None else min(next_beat, next_report, now + 1.0)
            self._stop.wait(max(0.0, wake - time.monotonic()))
            if self._stop.is_set():
                return
            now = time.monotonic()
            why = self.watch.overdue() if self.watch is not None else None
            if why is not None:
                self._stuck(why)
                return
            if now < self.quiet_until:  # asked to space renewals out: both kinds wait
                next_beat, next_report = max(next_beat, self.quiet_until), max(next_report, self.quiet_until)
                continue
            kind = "progress"
            try:
                if now >= next_report:
                    next_report = now + self.progress_s
                    pos = self.position
                    self._renewed(kind, self.transport.progress(self.lease, pos.step, pos.progress_pct, pos.phase),
                                  now)
                    next_beat = now + self.heartbeat_s  # the report renewed the lease
                if now >= next_beat:
                    kind = "heartbeat"
                    next_beat = now + self.heartbeat_s
                    self._renewed(kind, self.transport.heartbeat(self.lease), now)
            except LeaseLost as exc:
                log.warning("job %s epoch %d: %s", self.lease.job_id, self.lease.epoch, exc)
                self.on_renewal(kind, "lost")
                self.mark_lost(exc.reason)
            except TransportError as exc:
                self.on_renewal(kind, "unreachable")
                # Retry soon, but not in lockstep with every other worker that saw the same outage.
                log.warning("job %s: control plane unreachable (%s); retrying", self.lease.job_id, exc)
                next_beat = min(next_beat, now + 1.0 + random.random())
            except Exception:  # never let the lease die because of a bug in one answer
                log.exception("pulse of job %s", self.lease.job_id)

    def _renewed(self, kind: str, verdict: Verdict, sent_at: float) -> None:
        self.on_renewal(kind, "pending" if verdict.pending else "accepted" if verdict.accepted else "refused")
        self.heed(verdict, sent_at)

    def _stuck(self, why: str) -> None:
        """Report the run stuck (ends the lease as a retryable failure) and renew no more."""
        log.error("job %s epoch %d stuck: %s; reporting it and giving the lease up", self.lease.job_id,
                  self.lease.epoch, why)
        self.stuck_detail = why
        for attempt in range(5):
            try:
                self.transport.fail(self.lease, "stuck", why, True)
                break
            except LeaseLost as exc:
                log.warning("job %s: lease already gone (%s)", self.lease.job_id, exc.reason)
                break
            except TransportError as exc:
                log.warning("job %s: could not report stuck (%s); retrying", self.lease.job_id, exc)
                self._stop.wait(0.5 * 2 ** attempt)
        self.mark_lost("stuck")
        if self.on_stuck is not None:
            self.on_stuck(why)
