"""Run-at timer precision at volume (not a test): run with the local stack up.

`--spread` jobs due evenly over `--spread-s` seconds plus `--burst` jobs due at one millisecond in the middle
(cron on the hour), all submitted before the first is due; lateness (the JobQueued(due) decision minus the due
time) p50/p99/max, jobs lost and fired twice, counted from the events topic. `--kill-at S`: the scheduler is
killed with SIGKILL S seconds into the window and replaced at once; recovery (kill -> the new owner's first
event) and the lateness of the jobs due from the kill on. Harness: tests/integration/timerkit.py.

    .venv/bin/python bench/timer_bench.py [--spread 10000] [--spread-s 10] [--burst 2000] [--kill-at 5]
        [--partitions 6] [--json FILE]
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

from tests.integration.schedkit import drop_topics, make_topics, scheduler_settings  # noqa: E402
from tests.integration.timerkit import run_at_volume  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spread", type=int, default=10_000)
    ap.add_argument("--spread-s", type=float, default=10.0)
    ap.add_argument("--burst", type=int, default=2_000)
    ap.add_argument("--kill-at", type=float, default=None)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--intake-per-s", type=float, default=800.0,
                    help="submit rate the lead time before the first due time is sized by")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    settings = scheduler_settings("timers" + uuid.uuid4().hex[:8], partitions=args.partitions)
    make_topics(settings)
    try:
        run = run_at_volume(settings, Path(tempfile.mkdtemp()), args.spread, args.spread_s, args.burst,
                            kill_at_s=args.kill_at, intake_per_s=args.intake_per_s)
    finally:
        drop_topics(settings)
    out = {"machine": machine, "args": vars(args), **run.summary()}
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
