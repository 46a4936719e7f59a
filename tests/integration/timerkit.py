"""Run-at timers at volume against real scheduler processes: the harness of bench/timer_bench.py and of the
CI-sized test (tests/integration/test_scheduler_timers_at_volume.py).

Jobs are submitted with `run_at_ms` in the future (`spread` of them evenly over `spread_s` seconds, `burst` of
them due at one and the same millisecond in the middle, as a cron entry on the hour would make them), all of
them before the first is due, so the figure is the timers' and not the intake's. Each job's firing is its
`JobQueued(reason="due")` on the events topic; lateness is that event's decision time (`at_ms`) minus the due
time its `JobScheduled` carries. With `kill_at_s` the scheduler is killed with SIGKILL that many seconds into
the due window and a new process is started at once: recovery is the time from the kill to the first event
the new owner writes. Every count comes from the events topic, read from its start."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from spotreel.adapters.kafka import produce_command, producer
from spotreel.codec import Codec
from spotreel.domain import events as ev
from spotreel.platform.topics import events_topic
from spotreel.config.settings import Settings

from tests.integration.schedkit import SchedulerProc, submit


@dataclass
class TimerRun:
    jobs: int
    scheduled: int = 0  # jobs with a JobScheduled (accepted, not yet due)
    fired: dict[str, int] = field(default_factory=dict)  # job -> number of JobQueued(due)
    lateness_ms: list[int] = field(default_factory=list)  # one per first firing
    intake_s: float = 0.0  # first submit produced -> last JobScheduled read
    due_from_s: float = 0.0  # seconds from the first submit to the first due time
    recovery_s: float | None = None  # kill -> first event of the new owner
    late_after_kill_ms: list[int] = field(default_factory=list)  # lateness of jobs due while the owner was down
    scheduler_cpu_s: float = 0.0  # CPU time of the scheduler process(es) over the run

    @property
    def lost(self) -> int:
        return self.jobs - len(self.fired)

    @property
    def twice(self) -> int:
        return sum(1 for n in self.fired.values() if n > 1)

    def pct(self, q: float, xs: list[int] | None = None) -> int:
        xs = sorted(self.lateness_ms if xs is None else xs)
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0

    def summary(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "scheduled": self.scheduled, "fired": len(self.fired), "lost": self.lost,
                "fired_twice": self.twice, "lateness_ms": {"p50": self.pct(0.5), "p99": self.pct(0.99),
                                                           "max": max(self.lateness_ms, default=0)},
                "intake_s": round(self.intake_s, 2), "due_from_s": round(self.due_from_s, 2),
                "recovery_s": None if self.recovery_s is None else round(self.recovery_s, 2),
                "late_after_kill_ms": {"n": len(self.late_after_kill_ms), "p50": self.pct(0.5, self.late_after_kill_ms),
                                       "max": max(self.late_after_kill_ms, default=0)},
                "scheduler_cpu_s": round(self.scheduler_cpu_s, 2)}


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (its /proc stat), 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    import os

    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_at_volume(settings: Settings, tmp: Path, spread: int, spread_s: float, burst: int,
                  kill_at_s: float | None = None, intake_per_s: float = 800.0, settle_s: float = 3.0,
                  timeout_s: float = 120.0) -> TimerRun:
    """One run on fresh topics (the caller makes and drops them). `intake_per_s`: the submit rate the lead time
    before the first due time is sized by (every submission must be in before it)."""
    codec = Codec.default()
    total = spread + burst
    run = TimerRun(total)
    procs = [SchedulerProc(settings, tmp, "t1")]
    cpu: dict[int, float] = {}
    cons = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"timers-{uuid.uuid4()}",
                     "enable.auto.commit": False, "fetch.wait.max.ms": 20})
    cons.assign([TopicPartition(events_topic(settings), p, OFFSET_BEGINNING) for p in range(settings.partitions)])
    prod = producer(settings, **{"linger.ms": 5})
    try:
        procs[0].wait_owning()
        started = time.time()
        lead_s = settle_s + total / intake_per_s
        due0 = int((started + lead_s) * 1000)
        burst_at = due0 + int(spread_s * 500) // 1000 * 1000  # a whole second, in the middle of the window
        tag = uuid.uuid4().hex[:6]
        for i in range(total):
            due = due0 + int(i * spread_s * 1000 / spread) if i < spread else burst_at
            produce_command(prod, settings, codec, submit("timers", f"{tag}-{i}", run_at_ms=due))
            if i % 1000 == 0:
                prod.poll(0)
        prod.flush(60)
        run.due_from_s = due0 / 1000 - started
        due_of: dict[str, int] = {}
        kill_ms = int(due0 + kill_at_s * 1000) if kill_at_s is not None else None
        killed_at: float | None = None
        end = due0 / 1000 + spread_s + timeout_s
        last_first_fire = time.time()
        while time.time() < end:
            now = time.time()
            if kill_ms is not None and killed_at is None and now * 1000 >= kill_ms:
                cpu[procs[-1].proc.pid] = cpu_s(procs[-1].proc.pid)
                procs[-1].kill9()
                killed_at = time.time()
                procs.append(SchedulerProc(settings, tmp, "t2"))
            for msg in cons.consume(1000, 0.1):
                if msg.error():
                    continue
                e = codec.decode_message(msg.value())
                if isinstance(e, ev.JobScheduled):
                    if e.job_id not in due_of:
                        due_of[e.job_id] = e.run_at_ms
                        run.scheduled += 1
                        if run.scheduled == total:
                            run.intake_s = time.time() - started
                elif isinstance(e, ev.JobQueued) and e.reason == "due":
                    n = run.fired.get(e.job_id, 0)
                    run.fired[e.job_id] = n + 1
                    if n == 0:
                        late = e.at_ms - due_of.get(e.job_id, e.at_ms)
                        run.lateness_ms.append(late)
                        last_first_fire = time.time()
                        if killed_at is not None and due_of.get(e.job_id, 0) >= killed_at * 1000 - 1000:
                            run.late_after_kill_ms.append(late)
                if killed_at is not None and run.recovery_s is None and getattr(e, "at_ms", 0) > killed_at * 1000:
                    run.recovery_s = e.at_ms / 1000 - killed_at
            if len(run.fired) == total and time.time() - last_first_fire > settle_s:
                break  # every job fired; read on `settle_s` longer for a second firing
        for p in procs:
            if p.proc.poll() is None:
                cpu[p.proc.pid] = cpu_s(p.proc.pid)
        run.scheduler_cpu_s = sum(cpu.values())
        return run
    except BaseException:
        print_tails(procs)
        raise
    finally:
        cons.close()
        for p in procs:
            p.stop()


def print_tails(procs: list[SchedulerProc]) -> None:
    """On a failure: the end of every scheduler process's log."""
    for p in procs:
        print(f"----- tail of {p.log_path.name} -----\n{p.log()[-3000:]}")
