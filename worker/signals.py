"""Preemption notices: SIGTERM/SIGINT, or a provider's spot warning, turned into one flag with a deadline.

The run polls `notice.requested` between denoising steps, writes an emergency checkpoint, releases its
lease and exits. A watchdog ends the process when the grace period is over whatever the run is doing: a
spot instance vanishes at its deadline anyway, and the lease timeout covers a worker that never released.

An advisory (AWS's rebalance recommendation: the machine is at raised risk, with no deadline) is weaker: the
run checkpoints at once and goes on, and the worker takes no new lease after it (runtime.py).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Callable

log = logging.getLogger("spotreel.worker.signals")

# Exit status of a worker the watchdog ended: 128 + SIGTERM, like a process killed by the signal.
DEADLINE_EXIT = 143


class PreemptionNotice:
    def __init__(self, grace_seconds: float, exit_fn: Callable[[int], None] = os._exit) -> None:
        if grace_seconds <= 0:
            raise ValueError("grace_seconds must be > 0")
        self.grace_seconds = grace_seconds
        self._exit = exit_fn
        self._event = threading.Event()
        self.reason = ""
        self.deadline: float | None = None  # time.monotonic() by which the process must be gone
        self._advised = threading.Event()
        self.advice = ""

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    @property
    def advised(self) -> bool:
        """An early warning came: checkpoint now, finish the job, take no new one."""
        return self._advised.is_set()

    def advise(self, reason: str) -> None:
        if not self._advised.is_set():
            self.advice = reason
            self._advised.set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)

    def seconds_left(self) -> float:
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()

    def trigger(self, reason: str, grace_seconds: float | None = None) -> None:
        """Called by a signal handler or a provider's notice. The first notice sets the deadline."""
        if self._event.is_set():
            return
        grace = self.grace_seconds if grace_seconds is None else min(grace_seconds, self.grace_seconds)
        self.reason = reason
        self.deadline = time.monotonic() + grace
        self._event.set()
        watchdog = threading.Thread(target=self._watchdog, args=(grace,), name="preempt-watchdog", daemon=True)
        watchdog.start()

    def _watchdog(self, grace: float) -> None:
        time.sleep(grace)
        log.warning("preemption deadline (%.1f s) passed: exiting without a clean release", grace)
        self._exit(DEADLINE_EXIT)

    def install(self) -> None:
        """SIGTERM and SIGINT → notice; a second SIGINT ends the process at once (an impatient operator)."""

        def on_signal(signum: int, _frame) -> None:
            name = signal.Signals(signum).name
            if self._event.is_set() and signum == signal.SIGINT:
                self._exit(130)
            log.warning("%s: emergency checkpoint and lease release within %.1f s", name, self.grace_seconds)
            self.trigger(name.lower())

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
