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
LeaseRenewed event, a changelog write of the job state, and a row for the projector). A bare confluent-kafka
consume -> produce loop over the same records is the baseline; each rate is reported as a ratio to it.
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
from spotreel.infra.topics import events_topic, replies_topic  # noqa: E402
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


def run_mode(mode: str, leases: int, rounds: int) -> dict:
    s = scheduler_settings(f"rb{uuid.uuid4().hex[:8]}")
    make_topics(s)
    admin = AdminClient({"bootstrap.servers": s.kafka_bootstrap})
    sink = f"{s.topic_prefix}.sink"  # the bare loop's output
    admin.create_topics([NewTopic(sink, s.partitions, 1)])[sink].result(30)
    os.environ["SPOTREEL_SCHEDULER_PERSIST_RENEWALS"] = "1" if mode == "persist" else "0"
    tmp = Path(tempfile.mkdtemp(prefix="renewal-bench-"))
    proc = SchedulerProc(s, tmp, mode)
    bus = Bus(s)
    try:
        proc.wait_owning()
        held = _leases(bus, leases, mode)
        verdicts = [consumer(s, events_topic(s), OFFSET_END), consumer(s, replies_topic(s), OFFSET_END)]
        time.sleep(1.0)  # let the consumers resolve their end offsets before the burst
        wanted: set[str] = set()
        t0 = time.perf_counter()
        for r in range(rounds):
            for job_id, epoch, worker in held:
                cid = f"rn-{r}-{job_id}"
                wanted.add(cid)
                produce_command(bus.prod, s, bus.codec, c.RenewLease(cid, job_id, epoch, worker))
                bus.prod.poll(0)
        bus.prod.flush(60)
        counts = {"events": 0, "replies": 0}
        last = t0
        while wanted and time.perf_counter() - t0 < 300:
            for name, cons in zip(("events", "replies"), verdicts):
                for m in cons.consume(1000, 0.05):
                    if m.error():
                        continue
                    verdict = bus.codec.decode_message(m.value())
                    cid = getattr(verdict, "causation_id", None)
                    if cid in wanted:
                        assert isinstance(verdict, ev.LeaseRenewed), verdict
                        wanted.discard(cid)
                        counts[name] += 1
                        last = time.perf_counter()
        if wanted:
            raise SystemExit(f"{mode}: {len(wanted)} renewals unanswered\n{proc.log()[-3000:]}")
        for cons in verdicts:
            cons.close()
        n = leases * rounds
        # The bare loop over the very records the scheduler just read (commands topic from its start).
        bare = baseline(s, n + 2 * leases)
        return {"mode": mode, "renewals": n, "seconds": round(last - t0, 2),
                "renewals_per_s": round(n / (last - t0)), "bare_records_per_s": round(bare),
                "ratio": round(n / (last - t0) / bare, 4), "answered_by": counts}
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
    args = ap.parse_args()
    results = [run_mode(mode, args.leases, args.rounds) for mode in ("persist", "absorb")]
    for r in results:
        print(f"{r['mode']:8s} {r['renewals_per_s']:7d} renewals/s  bare {r['bare_records_per_s']:7d}/s  "
              f"ratio {r['ratio']:.4f}  answered by {r['answered_by']}")
    print(f"absorb / persist: {results[1]['renewals_per_s'] / results[0]['renewals_per_s']:.2f}x  "
          f"({platform.machine()}, {os.cpu_count()} cpus)")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
