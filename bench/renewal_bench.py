"""Renewal benchmark (not a test): what answering renewals without an event buys the scheduler.

Run with the local stack up:

    .venv/bin/python bench/renewal_bench.py [--leases 300] [--rounds 20]

For each mode, on its own topics (3 partitions) with a real scheduler process:
  1. `--leases` jobs are submitted and granted to as many workers, and each lease is confirmed with one
     renewal (the first renewal under a lease is always persisted: it confirms the lease);
  2. `--rounds` renewals per lease are produced in one burst (RenewLease, the holder's own), and the time from
     the first produced to the last verdict read (events topic or replies topic) gives renewals/s.
Modes: `absorb` (the default scheduler: renewals that change only the deadline are answered on the replies
topic, domain/renewals.py) and `persist` (SPOTREEL_SCHEDULER_PERSIST_RENEWALS=1: every renewal is a
LeaseRenewed event, a changelog write of the job state, and a row for the projector). With `--progress` the
renewals are progress reports that move the step every round, and the modes are `every-step`
(SPOTREEL_SCHEDULER_PROGRESS_PERSIST_S=0: each one an event) and `throttled` (30 s, the default: within the
interval they are answered on the replies topic and written in front of the job's next event). A bare
confluent-kafka consume -> produce loop over the same records is the baseline; each rate is reported as a
ratio to it, with the scheduler process's CPU seconds per renewal (from /proc). With `--batch N` the modes are
`absorb` and `batched`: the same renewals sent as a gateway's renewal window sends them, up to N to a
RenewalBatch record per partition (domain/renewal_batch.py), answered in RenewalReplies records.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import OFFSET_END  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.scheduler_bench import baseline, consumer  # noqa: E402
from spotreel.adapters.kafka import produce_command  # noqa: E402
from spotreel.domain import commands as c  # noqa: E402
from spotreel.domain import events as ev  # noqa: E402
from spotreel.adapters.partitioning import partition_for  # noqa: E402
from spotreel.platform.topics import commands_topic, events_topic, replies_topic  # noqa: E402
from tests.integration.schedkit import (Bus, SchedulerProc, drop_topics, make_topics,  # noqa: E402
                                        scheduler_settings, submit)


def _leases(bus: Bus, n: int, tag: str) -> list[tuple[str, int, str]]:
    for i in range(n):
        produce_command(bus.prod, bus.settings, bus.codec, submit("bench", f"{tag}-{i}"))
    bus.prod.flush(30)
    held = []
    for i in range(n):
        worker = f"rb-{tag}-{i}"
        answer = bus.request_work(worker, ttl_ms=600_000, timeout=60)
        assert isinstance(answer, ev.WorkAssigned), answer
        held.append((answer.job_id, answer.epoch, worker))
    for job_id, epoch, worker in held:  # confirm every lease: the first renewal is persisted in both modes
        produce_command(bus.prod, bus.settings, bus.codec, c.RenewLease(f"confirm-{job_id}", job_id, epoch, worker))
    bus.prod.flush(30)
    bus.wait_for(lambda: sum(isinstance(e, ev.LeaseRenewed) for e in bus.events) >= n, 120, "confirmations")
    return held


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _send_batches(bus: Bus, s, renewals: list, batch: int) -> int:
    """The renewals as a gateway's window sends them: per partition, RenewalBatch records of up to `batch`."""
    by_partition: dict[int, list] = {}
    for command in renewals:
        by_partition.setdefault(partition_for(command.job_id, s.partitions), []).append(command)
    records = 0
    now = int(time.time() * 1000)
    for p, commands in by_partition.items():
        for i in range(0, len(commands), batch):
            value = bus.codec.encode_message(c.RenewalBatch(
                f"rb-{p}-{i}-{uuid.uuid4().hex[:6]}", "gw-bench", tuple(c.batched(x, now) for x in commands[i:i + batch])))
            bus.prod.produce(commands_topic(s), value=value, key=b"gw-bench", partition=p)
            bus.prod.poll(0)
            records += 1
    return records


def run_mode(mode: str, leases: int, rounds: int, batch: int = 0) -> dict:
    s = scheduler_settings(f"rb{uuid.uuid4().hex[:8]}")
    make_topics(s)
    admin = AdminClient({"bootstrap.servers": s.kafka_bootstrap})
    sink = f"{s.topic_prefix}.sink"  # the bare loop's output
    admin.create_topics([NewTopic(sink, s.partitions, 1)])[sink].result(30)
    os.environ["SPOTREEL_SCHEDULER_PERSIST_RENEWALS"] = "1" if mode == "persist" else "0"
    os.environ["SPOTREEL_SCHEDULER_PROGRESS_PERSIST_S"] = "0" if mode == "every-step" else "30"
    progress = mode in ("every-step", "throttled")
    tmp = Path(tempfile.mkdtemp(prefix="renewal-bench-"))
    proc = SchedulerProc(s, tmp, mode)
    bus = Bus(s)
    try:
        proc.wait_owning()
        held = _leases(bus, leases, mode)
        verdicts = [consumer(s, events_topic(s), OFFSET_END), consumer(s, replies_topic(s), OFFSET_END)]
        time.sleep(1.0)  # let the consumers resolve their end offsets before the burst
        wanted: set[str] = set()
        cpu0 = _cpu_s(proc.proc.pid)
        t0 = time.perf_counter()
        records = 0
        for r in range(rounds):
            this_round = []
            for job_id, epoch, worker in held:
                cid = f"rn-{r}-{job_id}"
                wanted.add(cid)
                command = c.ReportProgress(cid, job_id, epoch, worker, r + 1, 100.0 * (r + 1) / (rounds + 1)) \
                    if progress else c.RenewLease(cid, job_id, epoch, worker)
                if mode == "batched":
                    this_round.append(command)
                    continue
                produce_command(bus.prod, s, bus.codec, command)
                bus.prod.poll(0)
                records += 1
            if this_round:
                records += _send_batches(bus, s, this_round, batch)
        bus.prod.flush(60)
        counts = {"events": 0, "replies": 0, "batch replies": 0}
        last = t0
        while wanted and time.perf_counter() - t0 < 300:
            for name, cons in zip(("events", "replies"), verdicts):
                for m in cons.consume(1000, 0.05):
                    if m.error():
                        continue
                    verdict = bus.codec.decode_message(m.value())
                    batch_replies = isinstance(verdict, ev.RenewalReplies)
                    for one in (*verdict.renewed, *verdict.progressed) if batch_replies else (verdict,):
                        cid = getattr(one, "causation_id", None)
                        if cid in wanted:
                            assert isinstance(one, ev.ProgressReported if progress else ev.LeaseRenewed), one
                            wanted.discard(cid)
                            counts["batch replies" if batch_replies else name] += 1
                            last = time.perf_counter()
        cpu = _cpu_s(proc.proc.pid) - cpu0
        if wanted:
            raise SystemExit(f"{mode}: {len(wanted)} renewals unanswered\n{proc.log()[-3000:]}")
        for cons in verdicts:
            cons.close()
        n = leases * rounds
        # The bare loop over the very records the scheduler just read (commands topic from its start).
        bare = baseline(s, records + 2 * leases)
        return {"mode": mode, "renewals": n, "records": records, "seconds": round(last - t0, 2),
                "renewals_per_s": round(n / (last - t0)), "bare_records_per_s": round(bare),
                "ratio": round(n / (last - t0) / bare, 4), "answered_by": counts,
                "scheduler_cpu_ms_per_renewal": round(1000 * cpu / n, 3)}
    finally:
        bus.close()
        proc.stop()
        drop_topics(s)
        admin.delete_topics([sink])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--leases", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--progress", action="store_true", help="progress reports that move the step every round")
    ap.add_argument("--batch", type=int, default=0,
                    help="compare renewals alone (absorb) with RenewalBatch records of up to this many (batched)")
    args = ap.parse_args()
    if args.batch:
        modes = ("absorb", "batched")
    else:
        modes = ("every-step", "throttled") if args.progress else ("persist", "absorb")
    results = [run_mode(mode, args.leases, args.rounds, args.batch) for mode in modes]
    for r in results:
        print(f"{r['mode']:10s} {r['renewals_per_s']:7d} renewals/s  bare {r['bare_records_per_s']:7d}/s  "
              f"ratio {r['ratio']:.4f}  scheduler {r['scheduler_cpu_ms_per_renewal']:.3f} CPU ms each  "
              f"answered by {r['answered_by']}")
    print(f"{modes[1]} / {modes[0]}: {results[1]['renewals_per_s'] / results[0]['renewals_per_s']:.2f}x  "
          f"({platform.machine()}, {os.cpu_count()} cpus)")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
