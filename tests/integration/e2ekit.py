"""Short jobs end to end over the Kafka transport against real scheduler processes: the harness of
bench/e2e_jobs_bench.py and of its CI-sized test (tests/integration/test_scheduler_jobs_end_to_end.py).

Jobs are submitted open-loop at a rate per stage (SubmitJob on the commands topic, as a gateway produces
it); a crowd of simulated Kafka workers with zero-length renders asks the partitions whose pool stats show
queued work (RequestWork to that partition, as dispatch/asking.py does), and completes each granted job at
once (CompleteJob). Every figure comes from the events topic, read from its start after the run: per job its
JobSubmitted, JobLeased and JobSucceeded decision times, so submit→start and submit→done, completions per
second in each stage, and each job completed exactly once. CPU per process from /proc."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

from spotreel.adapters.kafka import produce_command, producer
from spotreel.codec import Codec
from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.platform.topics import assignments_topic, events_topic, pool_stats_topic
from spotreel.config.settings import Settings

from tests.integration.schedkit import GPU, MODEL, SchedulerProc, submit
from tests.integration.timerkit import cpu_s, print_tails

ASK_AGAIN_S = 0.05  # a refused worker's pause before it asks again (a real worker backs off longer)


@dataclass
class Stage:
    rate: float
    started: float
    ended: float = 0.0
    submitted: int = 0


@dataclass
class JobsRun:
    schedulers: int
    stages: list[Stage] = field(default_factory=list)
    submitted: dict[str, int] = field(default_factory=dict)  # job -> JobSubmitted at_ms
    leased: dict[str, int] = field(default_factory=dict)  # job -> first JobLeased at_ms
    done: dict[str, int] = field(default_factory=dict)  # job -> first JobSucceeded at_ms
    succeeded_twice: int = 0
    produced: int = 0  # SubmitJob records produced
    cpu_s: dict[str, float] = field(default_factory=dict)  # process -> CPU seconds over the stages
    wall_s: float = 0.0

    def _pct(self, xs: list[int], q: float) -> int:
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0

    def stage_figures(self) -> list[dict[str, Any]]:
        out = []
        for st in self.stages:
            lo, hi = st.started * 1000, st.ended * 1000
            jobs = [j for j, t in self.submitted.items() if lo <= t < hi]
            start = [self.leased[j] - self.submitted[j] for j in jobs if j in self.leased]
            total = [self.done[j] - self.submitted[j] for j in jobs if j in self.done]
            completed_in = sum(1 for t in self.done.values() if lo <= t < hi)
            out.append({"rate": st.rate, "submitted_per_s": round(st.submitted / (st.ended - st.started), 1),
                        "completed_per_s": round(completed_in / (st.ended - st.started), 1),
                        "submit_to_start_ms": {"p50": self._pct(start, 0.5), "p99": self._pct(start, 0.99)},
                        "submit_to_done_ms": {"p50": self._pct(total, 0.5), "p99": self._pct(total, 0.99)},
                        "jobs": len(jobs), "completed_of_them": len(total)})
        return out

    def summary(self) -> dict[str, Any]:
        jobs_done = len(self.done)
        return {"schedulers": self.schedulers, "produced": self.produced, "submitted": len(self.submitted),
                "completed": jobs_done, "completed_twice": self.succeeded_twice,
                "not_completed": len(self.submitted) - jobs_done, "stages": self.stage_figures(),
                "cpu_cores": {k: round(v / self.wall_s, 3) for k, v in self.cpu_s.items()} if self.wall_s else {},
                "cpu_ms_per_job": {k: round(v * 1000 / max(1, jobs_done), 3) for k, v in self.cpu_s.items()}}


class Fleet:
    """Zero-length-render workers over Kafka: ask where the pool stats show work, complete at once."""

    def __init__(self, settings: Settings, codec: Codec, workers: int) -> None:
        self.settings, self.codec = settings, codec
        self.prod = producer(settings, **{"linger.ms": 2})
        self.answers = self._consumer(assignments_topic(settings), OFFSET_END)
        self.stats = self._consumer(pool_stats_topic(settings), OFFSET_BEGINNING)
        self.queued = {p: 0 for p in range(settings.partitions)}
        self.idle = [f"ew{i}" for i in range(workers)]
        self.resting: list[tuple[float, str]] = []  # refused: (ask again at, worker)
        self.pending: dict[str, tuple[str, int]] = {}  # request id -> (worker, partition)
        self.rr = 0

    def _consumer(self, topic: str, start: int) -> Consumer:
        cons = Consumer({"bootstrap.servers": self.settings.kafka_bootstrap, "group.id": f"e2e-{uuid.uuid4()}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 5})
        cons.assign([TopicPartition(topic, p, start) for p in range(self.settings.partitions)])
        return cons

    def step(self) -> None:
        now = time.monotonic()
        for m in self.stats.consume(200, 0):
            if not m.error():
                s = self.codec.decode_message(m.value())
                self.queued[s.partition] = s.queued
        while self.resting and self.resting[0][0] <= now:
            self.idle.append(self.resting.pop(0)[1])
        inflight = dict.fromkeys(self.queued, 0)
        for _, p in self.pending.values():
            inflight[p] += 1
        targets = [p for p in self.queued for _ in range(max(0, self.queued[p] - inflight[p]))]
        while self.idle and targets:
            p = targets.pop(self.rr % len(targets))
            self.rr += 1
            w = self.idle.pop()
            rid = uuid.uuid4().hex
            self.pending[rid] = (w, p)
            produce_command(self.prod, self.settings, self.codec,
                            c.RequestWork(rid, w, GPU, (MODEL,), (), False, 60_000, 0), partition=p)
        self.prod.poll(0)
        for m in self.answers.consume(500, 0.005):
            if m.error():
                continue
            a = self.codec.decode_message(m.value())
            got = self.pending.pop(getattr(a, "request_id", ""), None)
            if got is None:
                continue
            w, p = got
            if isinstance(a, ev.WorkAssigned):
                self.queued[p] = max(0, self.queued[p] - 1)
                produce_command(self.prod, self.settings, self.codec,
                                c.CompleteJob(uuid.uuid4().hex, a.job_id, a.epoch, w, "o", "s", 1))
                self.idle.append(w)
            else:
                self.queued[p] = 0  # until its next stats say otherwise
                self.resting.append((time.monotonic() + ASK_AGAIN_S, w))

    def close(self) -> None:
        self.prod.flush(30)
        self.answers.close()
        self.stats.close()


def _kafka_pid() -> int | None:
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info.get("cmdline") or []
        if any(part == "kafka.Kafka" for part in cmd):
            return proc.pid
    return None


def run_jobs(settings: Settings, tmp: Path, schedulers: int, rates: list[float], stage_s: float,
             workers: int = 200, drain_s: float = 20.0) -> JobsRun:
    """One run on fresh topics (the caller makes and drops them)."""
    import os

    codec = Codec.default()
    run = JobsRun(schedulers)
    procs = [SchedulerProc(settings, tmp, f"e{i}") for i in range(schedulers)]
    fleet = Fleet(settings, codec, workers)
    sub = producer(settings, **{"linger.ms": 5})
    try:
        owned: set[int] = set()
        for proc in procs:
            owned |= proc.wait_owning()
        deadline = time.monotonic() + 60
        while schedulers > 1 and time.monotonic() < deadline:  # every process owns its share of partitions
            owns = [proc.wait_owning(after=0) for proc in procs]
            if all(owns) and set().union(*owns) == set(range(settings.partitions)) and \
                    sum(len(o) for o in owns) == settings.partitions:
                break
            time.sleep(0.5)
        pids = {f"scheduler{i + 1}": p.proc.pid for i, p in enumerate(procs)}
        kafka = _kafka_pid()
        if kafka is not None:
            pids["kafka"] = kafka
        pids["bench (submitter + fleet)"] = os.getpid()
        cpu0 = {k: cpu_s(pid) for k, pid in pids.items()}
        t0 = time.time()
        tag = uuid.uuid4().hex[:6]
        for rate in rates:
            st = Stage(rate, time.time())
            run.stages.append(st)
            while time.time() - st.started < stage_s:
                due = int((time.time() - st.started) * rate)
                while st.submitted < due:
                    produce_command(sub, settings, codec, submit("e2e", f"{tag}-{run.produced}"))
                    st.submitted += 1
                    run.produced += 1
                sub.poll(0)
                fleet.step()
            while st.submitted < int(rate * stage_s):  # the stage's whole count, whatever the last step's time
                produce_command(sub, settings, codec, submit("e2e", f"{tag}-{run.produced}"))
                st.submitted += 1
                run.produced += 1
            st.ended = time.time()
        sub.flush(30)
        drain_end = time.time() + drain_s
        events = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"e2e-ev-{uuid.uuid4()}",
                           "enable.auto.commit": False, "fetch.wait.max.ms": 20})
        events.assign([TopicPartition(events_topic(settings), p, OFFSET_BEGINNING)
                       for p in range(settings.partitions)])
        while time.time() < drain_end and len(run.done) < run.produced:
            fleet.step()
            _read_events(events, codec, run)
        run.wall_s = time.time() - t0
        run.cpu_s = {k: cpu_s(pid) - cpu0[k] for k, pid in pids.items()}
        settle = time.time() + 2.0
        while time.time() < settle:  # a second JobSucceeded would land within moments
            _read_events(events, codec, run)
        events.close()
        return run
    except BaseException:
        print_tails(procs)
        raise
    finally:
        fleet.close()
        for p in procs:
            p.stop()


def _read_events(events: Consumer, codec: Codec, run: JobsRun) -> None:
    for m in events.consume(2000, 0.05):
        if m.error():
            continue
        e = codec.decode_message(m.value())
        if isinstance(e, ev.JobSubmitted):
            run.submitted.setdefault(e.job_id, e.at_ms)
        elif isinstance(e, ev.JobLeased):
            run.leased.setdefault(e.job_id, e.at_ms)
        elif isinstance(e, ev.JobSucceeded):
            if e.job_id in run.done:
                run.succeeded_twice += 1
            run.done.setdefault(e.job_id, e.at_ms)

