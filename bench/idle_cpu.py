"""What the local stack costs doing nothing (not a test): CPU per process of `spotreel infra up` while no
request, job or worker is about, over a window (default 60 s), in cores (1.0 = one core busy).

    .venv/bin/python bench/idle_cpu.py [--seconds 60] [--out FILE]

Idle cost is a floor under every other figure in bench/README.md (the peak's per-message CPU includes it):
the JVMs' housekeeping (Kafka's and Cassandra's timers, GC), the Faust scheduler's timer and stats loops,
the consumers' fetch loops of the projector, the notifier and the gateway.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from spotreel.devstack.stack import components
    from spotreel.services.simulator.stack import cpu_seconds, machine_busy_seconds
    from spotreel.config.settings import Settings

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    pids = {}
    for server in components(Settings()):
        running = server.running()
        if running is not None:
            pids[server.name] = running.pid
    if not pids:
        raise SystemExit("nothing of the local stack is running: `.venv/bin/spotreel infra up`")
    before, busy0, t0 = {n: cpu_seconds(p) for n, p in pids.items()}, machine_busy_seconds(), time.monotonic()
    time.sleep(args.seconds)
    dt = time.monotonic() - t0
    cores = {n: round(((cpu_seconds(p) or 0.0) - (before[n] or 0.0)) / dt, 4) for n, p in pids.items()}
    result = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
              "seconds": round(dt, 1), "cores": cores, "stack_cores": round(sum(cores.values()), 4),
              "machine_cores": round((machine_busy_seconds() - busy0) / dt, 4)}
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
