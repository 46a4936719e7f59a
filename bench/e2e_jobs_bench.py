"""Short jobs end to end over the Kafka transport (not a test): run with the local stack up.

Jobs submitted open-loop at each `--rates` stage for `--stage-s` seconds, simulated Kafka workers with
zero-length renders (`--workers`), 1 and then 2 scheduler processes on `--partitions` partitions in the same
run (the ratio is the scale-out figure): per stage submitted and completed per second, submit→start and
submit→done p50/p99, every job completed exactly once (counted from the events topic), CPU per process and
per job. Harness: tests/integration/e2ekit.py.

    .venv/bin/python bench/e2e_jobs_bench.py [--rates 200,400,800] [--stage-s 15] [--workers 200]
        [--partitions 12] [--processes 1,2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.e2ekit import run_jobs  # noqa: E402
from tests.integration.schedkit import drop_topics, make_topics, scheduler_settings  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="200,400,800")
    ap.add_argument("--stage-s", type=float, default=15.0)
    ap.add_argument("--workers", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--processes", default="1,2")
    ap.add_argument("--drain-s", type=float, default=20.0)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    out = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                      f"Python {platform.python_version()}", "args": vars(args), "runs": []}
    for n in [int(x) for x in args.processes.split(",")]:
        settings = scheduler_settings("e2e" + uuid.uuid4().hex[:8], partitions=args.partitions)
        make_topics(settings)
        try:
            run = run_jobs(settings, Path(tempfile.mkdtemp()), n, rates, args.stage_s, args.workers, args.drain_s)
        finally:
            drop_topics(settings)
        out["runs"].append(run.summary())
        print(json.dumps(run.summary(), indent=1), flush=True)
    if len(out["runs"]) == 2:
        a, b = out["runs"]
        out["ratio_completed_per_s_by_stage"] = [
            round(y["completed_per_s"] / x["completed_per_s"], 3) if x["completed_per_s"] else None
            for x, y in zip(a["stages"], b["stages"])]
        print("ratio 2/1 processes, completed/s by stage:", out["ratio_completed_per_s_by_stage"])
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
