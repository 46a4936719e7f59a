"""Leases held by hand against a real scheduler: a worker that takes a job, and a thread that keeps its lease
alive by renewing straight to the commands topic."""

from __future__ import annotations

import threading
import uuid

from spotreel.domain import commands as c
from spotreel.domain import events as ev
from tests.integration.schedkit import Bus, submit


def leased(bus: Bus, name: str, ttl_ms: int) -> tuple[str, int, str]:
    """(job id, epoch, worker) of a lease a fresh worker named after `name` was just given."""
    worker = f"{name}-{uuid.uuid4().hex[:6]}"
    job = submit("acme", f"{name}-{uuid.uuid4().hex[:8]}")
    bus.send(job)
    bus.wait_event(job.job_id, ev.JobQueued)
    answer = bus.request_work(worker, ttl_ms=ttl_ms)
    # Any queued job will do (an earlier test's job may be queued again); each worker holds its own.
    assert isinstance(answer, ev.WorkAssigned), answer
    return answer.job_id, answer.epoch, worker


class Renewer(threading.Thread):
    """A live lease holder: a renewal every `every_s`, produced straight to the commands topic; `sent` counts
    the renewals produced."""

    def __init__(self, settings, job_id: str, epoch: int, worker: str, every_s: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.bus = Bus(settings)
        self.job_id, self.epoch, self.worker, self.every_s = job_id, epoch, worker, every_s
        self.sent = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.bus.send(c.RenewLease(f"renew-{self.worker}-{self.sent}", self.job_id, self.epoch, self.worker))
            self.sent += 1
            self.halt.wait(self.every_s)

    def stop(self) -> None:
        self.halt.set()
        self.join(10)
        self.bus.close()
