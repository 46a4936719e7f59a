"""Scheduler benchmark (not a test): run with the local stack up.

1. Throughput: N SubmitJob commands are produced first; then (a) a bare confluent-kafka loop consumes
   them and produces each record to a sink topic, (b) the real scheduler process turns them into events.
   Both rates are measured from first to last record/event, so start-up is excluded; the ratio is the
   figure to compare across machines.
2. Dispatch latency with 100 idle workers and a steady submit rate: per RequestWork that got a lease,
   the time from producing the request to reading the WorkAssigned answer (2 Kafka hops).

    .venv/bin/python bench/scheduler_bench.py [--jobs 2000] [--rate 20] [--seconds 15] [--profile FILE]
"""

from __future__ import annotations

import argparse
import platform
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, Producer, TopicPartition  # noqa: E402

from spotreel.adapters.kafka import assignments_topic, produce_command  # noqa: E402
from spotreel.domain import commands as c  # noqa: E402
from spotreel.domain import events as ev  # noqa: E402
from spotreel.platform.topics import commands_topic, events_topic, pool_stats_topic  # noqa: E402
from tests.integration.schedkit import (GPU, MODEL, Bus, SchedulerProc, drop_topics, make_topics,  # noqa: E402
                                        scheduler_settings, submit)


def consumer(settings, topic, start=OFFSET_BEGINNING):
    cons = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": uuid.uuid4().hex,
                     "enable.auto.commit": False, "fetch.wait.max.ms": 5})
    cons.assign([TopicPartition(topic, p, start) for p in range(settings.partitions)])
    return cons


def baseline(settings, n: int) -> float:
    sink = f"{settings.topic_prefix}.sink"
    cons = consumer(settings, commands_topic(settings))
    prod = Producer({"bootstrap.servers": settings.kafka_bootstrap, "enable.idempotence": True, "linger.ms": 1})
    done, first = 0, None
    while done < n:
        for m in cons.consume(500, 1.0):
            if m.error():
                continue
            first = first or time.perf_counter()
            prod.produce(sink, key=m.key(), value=m.value(), partition=m.partition())
            prod.poll(0)
            done += 1
    prod.flush(30)
    elapsed = time.perf_counter() - first
    cons.close()
    return n / elapsed


def scheduler_rate(settings, tmp: Path, n: int, profile: str = "", env: dict[str, str] | None = None) -> float:
    env = dict(env or {}, **({"SPOTREEL_SCHEDULER_PROFILE": profile} if profile else {}))
    proc = SchedulerProc(settings, tmp, f"thr{uuid.uuid4().hex[:4]}", env=env)
    cons = consumer(settings, events_topic(settings))
    try:
        seen, first, last = 0, None, None
        while seen < 2 * n:
            for m in cons.consume(1000, 1.0):
                if m.error():
                    continue
                first = first or time.perf_counter()
                last = time.perf_counter()
                seen += 1
            if proc.proc.poll() is not None:
                raise SystemExit(proc.log()[-3000:])
        return n / (last - first)
    finally:
        cons.close()
        proc.stop()


def dispatch(settings, tmp: Path, rate: float, seconds: float, workers: int = 100) -> list[float]:
    proc = SchedulerProc(settings, tmp, "disp")
    proc.wait_owning()
    bus = Bus(settings)
    prod = bus.prod
    answers = consumer(settings, assignments_topic(settings), OFFSET_END)
    stats_c = consumer(settings, pool_stats_topic(settings))
    queued = {p: 0 for p in range(settings.partitions)}
    idle = [f"bw{i}" for i in range(workers)]
    pending: dict[str, tuple[str, float, int]] = {}
    latencies: list[float] = []
    submitted = 0
    start = time.perf_counter()
    rr = 0
    try:
        while time.perf_counter() - start < seconds:
            now = time.perf_counter()
            while submitted < (now - start) * rate:
                produce_command(prod, settings, bus.codec, submit("bench", f"{uuid.uuid4().hex}"))
                submitted += 1
            for m in stats_c.consume(100, 0):
                if not m.error():
                    s = bus.codec.decode_message(m.value())
                    queued[s.partition] = s.queued
            inflight = {p: 0 for p in queued}
            for _, _, p in pending.values():
                inflight[p] += 1
            # An idle worker asks a partition that advertises queued work (one request per queued job).
            targets = [p for p in queued for _ in range(max(0, queued[p] - inflight[p]))]
            while idle and targets:
                p = targets.pop(rr % len(targets))
                rr += 1
                w = idle.pop()
                rid = uuid.uuid4().hex
                pending[rid] = (w, time.perf_counter(), p)
                produce_command(prod, settings, bus.codec,
                                c.RequestWork(rid, w, GPU, (MODEL,), (), False, 60_000, 0), partition=p)
            prod.poll(0)
            for m in answers.consume(200, 0.005):
                if m.error():
                    continue
                a = bus.codec.decode_message(m.value())
                got = pending.pop(a.request_id, None)
                if got is None:
                    continue
                w, t0, p = got
                if isinstance(a, ev.WorkAssigned):
                    latencies.append(time.perf_counter() - t0)
                    queued[p] = max(0, queued[p] - 1)
                    produce_command(prod, settings, bus.codec,
                                    c.CompleteJob(uuid.uuid4().hex, a.job_id, a.epoch, w, "o", "s", 1))
                else:
                    queued[p] = 0
                idle.append(w)
        return latencies
    finally:
        answers.close()
        stats_c.close()
        bus.close()
        proc.stop()


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--linger-ms", default="",
                    help="comma-separated producer lingers (SPOTREEL_SCHEDULER_PRODUCER_LINGER_MS): the throughput "
                         "run once per value, back to back, each against its own bare loop")
    ap.add_argument("--profile", default="", help="cProfile the scheduler of the throughput run into this file "
                    "(pstats format) and skip the dispatch run")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}")
    for linger in (args.linger_ms.split(",") if args.linger_ms else [None]):
        env = {"SPOTREEL_SCHEDULER_PRODUCER_LINGER_MS": linger} if linger is not None else None
        settings = scheduler_settings("bench" + uuid.uuid4().hex[:8], partitions=6)
        make_topics(settings)
        try:
            from confluent_kafka.admin import AdminClient, NewTopic
            admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
            sink = f"{settings.topic_prefix}.sink"
            admin.create_topics([NewTopic(sink, 6, 1)])[sink].result(30)
            prod = Producer({"bootstrap.servers": settings.kafka_bootstrap, "linger.ms": 5})
            from spotreel.codec import Codec
            codec = Codec.default()
            for i in range(args.jobs):
                produce_command(prod, settings, codec, submit("bench", f"k{i}"))
                prod.poll(0)
            prod.flush(60)
            base = baseline(settings, args.jobs)
            sched = scheduler_rate(settings, tmp, args.jobs, args.profile, env)
            print(f"throughput{'' if linger is None else f' (linger {linger} ms)'}: scheduler {sched:.0f} "
                  f"commands/s, bare consume-produce loop {base:.0f} records/s, ratio {sched / base:.3f} "
                  f"({args.jobs} SubmitJob -> {2 * args.jobs} events)", flush=True)
        finally:
            drop_topics(settings)
    if args.profile:
        return
    settings = scheduler_settings("benchd" + uuid.uuid4().hex[:8], partitions=6)
    make_topics(settings)
    try:
        lat = dispatch(settings, tmp, args.rate, args.seconds)
        print(f"dispatch: {len(lat)} leases, 100 idle workers, {args.rate:.0f} submits/s: "
              f"ask->lease p50 {pct(lat, 0.5):.1f} ms, p99 {pct(lat, 0.99):.1f} ms "
              f"(2 Kafka hops: commands topic, assignments topic; the JobLeased event is written and acked "
              f"before the answer)")
    finally:
        drop_topics(settings)


if __name__ == "__main__":
    main()
