"""`spotreel scheduler` (run the Faust app) and `spotreel replay` (incident review, state rebuild)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from spotreel.config import knobs


def register(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("scheduler", help="run the scheduler (Faust): commands in, events out")
    run.add_argument("--data-dir", type=Path, default=None, help="Faust data dir (default under SPOTREEL_HOME)")
    run.add_argument("--metrics-port", type=int, default=0, help="Prometheus on 127.0.0.1:PORT (0: off)")
    run.add_argument("--stats-interval", type=float, default=1.0,
                     help="seconds between pool-stats ticks (a pool that had nothing queued publishes at once)")
    run.add_argument("--loglevel", default="info", help="level of the Faust worker's and spotreel's logs")
    knobs.from_environment(run, "SPOTREEL_SCHEDULER_")
    run.set_defaults(func=_run)

    rep = sub.add_parser("replay", help="print a job's timeline, or rebuild state from the events topic")
    rep.add_argument("job_id", nargs="?", help="the job whose timeline to print")
    rep.add_argument("--rebuild", action="store_true", help="fold the events topic and compare with the table")
    rep.add_argument("--why", action="store_true",
                     help="for each grant of JOB_ID, why dispatch chose it then (tier, aging, share, warm model)")
    rep.set_defaults(func=_replay)


def _run(args: argparse.Namespace, settings) -> int:
    from faust import Worker

    from spotreel.adapters.kafka import ensure_scheduler_topics
    from spotreel.runtime import tracing
    from spotreel.services.scheduler.app import Scheduler

    tracing.setup("scheduler")
    ensure_scheduler_topics(settings)
    scheduler = Scheduler(settings, data_dir=args.data_dir, metrics_port=args.metrics_port,
                          stats_interval=args.stats_interval)
    worker = Worker(scheduler.app, loglevel=args.loglevel, quiet=True)
    from spotreel.runtime import gctune

    gctune.install(settings.gc_threshold)
    if settings.scheduler_profile:
        _profile(settings.scheduler_profile)
    logging.getLogger("spotreel").setLevel(args.loglevel.upper())
    worker.execute_from_commandline()
    return 0


def _profile(path: str) -> None:
    """cProfile for the whole process, its statistics written to `path` at exit (Faust's worker exits on
    SIGTERM through `sys.exit`, so atexit runs)."""
    import atexit
    import cProfile

    profiler = cProfile.Profile()
    atexit.register(lambda: (profiler.disable(), profiler.dump_stats(path)))
    profiler.enable()


def _replay(args: argparse.Namespace, settings) -> int:
    from spotreel.services.scheduler import replay

    if args.rebuild:
        report = replay.rebuild(settings)
        print(report.summary())
        return 0 if report.ok else 1
    if not args.job_id:
        print("replay: give a JOB_ID or --rebuild", file=sys.stderr)
        return 2
    lines = replay.why(settings, args.job_id) if args.why else replay.timeline(settings, args.job_id)
    if not lines:
        print(f"replay: no {'grants' if args.why else 'events'} for {args.job_id}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0
