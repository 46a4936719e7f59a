"""The scheduler handler's own cost per command (not a test): decode, decide, absorb or fold, encode; no Kafka.

    .venv/bin/python bench/handler_bench.py renew|progress [PERSIST_MS] [--profile]

300 confirmed, running leases on one partition, then 20 rounds of RenewLease (`renew`) or of ReportProgress
moving the step every round (`progress`), each handled as the scheduler's batch loop handles it (absorbed:
remembered in the partition, reply encoded; written: events encoded, state folded and observed). PERSIST_MS is
the progress throttle (`SPOTREEL_SCHEDULER_PROGRESS_PERSIST_S` × 1000; 0: every step an event). Prints the
process CPU time per command; `--profile` prints cProfile's top functions instead of timing cleanly.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spotreel.codec import Codec  # noqa: E402
from spotreel.domain import commands as c  # noqa: E402
from spotreel.services.scheduler.handler import Handler  # noqa: E402
from spotreel.services.scheduler.partition import PartitionState  # noqa: E402
from tests.unit.jobkit import T0, Driver, submit  # noqa: E402

LEASES, ROUNDS = 300, 20


def main() -> None:
    kind = sys.argv[1] if len(sys.argv) > 1 else "renew"
    persist_ms = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 30_000
    codec = Codec.default()
    states: dict = {}
    handler = Handler(codec, 1, states.get, progress_persist_ms=persist_ms)
    part = PartitionState(0)
    held = []
    for i in range(LEASES):
        d = Driver()
        d.send(submit(key=f"k{i}"))
        d.grant(f"w{i}")
        d.send(c.RenewLease("first", d.job_id, d.s.epoch, f"w{i}"), advance=1_000)
        d.send(c.ReportProgress("p0", d.job_id, d.s.epoch, f"w{i}", 0, 0.0), advance=1_000)
        states[d.job_id] = d.s
        part.observe(None, d.s)
        held.append((d.job_id, d.s.epoch, f"w{i}"))
    msgs = [codec.encode_message(
        c.ReportProgress(f"r{r}-{job}", job, epoch, w, r + 1, 5.0 * (r + 1)) if kind == "progress"
        else c.RenewLease(f"r{r}-{job}", job, epoch, w)) for r in range(ROUNDS) for job, epoch, w in held]
    now = T0 + 5_000

    def run() -> None:
        for i, m in enumerate(msgs):
            out = handler.handle(part, "commands", i, None, m, now + i)
            if out.reply is not None:
                part.absorb(out.reply_to, (out.reply.epoch, out.reply.lease_expires_at_ms), out.reply)
                codec.encode_message(out.reply)
            for e in out.events:
                codec.encode_message(e)
            for before, after in out.states.values():
                states[after.job_id] = after
                part.observe(before, after)

    started = time.process_time()
    if "--profile" in sys.argv:
        profile = cProfile.Profile()
        profile.runcall(run)
        pstats.Stats(profile).sort_stats("tottime").print_stats(15)
    else:
        run()
    print(f"{kind} (progress throttle {persist_ms} ms): "
          f"{(time.process_time() - started) / len(msgs) * 1e6:.1f} µs CPU a command over {len(msgs)}")


if __name__ == "__main__":
    main()
