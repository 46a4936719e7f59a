"""`spotreel projector`: wires settings to the projector and runs it until SIGTERM (or until idle)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from spotreel.config import knobs
from spotreel.config.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("projector", help="materialize the events topic into the Cassandra read models")
    p.add_argument("--rebuild", action="store_true", help="re-read the events topic from offset 0")
    p.add_argument("--truncate", action="store_true", help="with --rebuild: empty the read-model tables first")
    p.add_argument("--until-idle", "--once", dest="until_idle", action="store_true",
                   help="exit once every partition is read to its end")
    p.add_argument("--metrics-port", type=int, default=0,
                   help="serve Prometheus metrics (spotreel_projection_lag) on 127.0.0.1:PORT")
    p.add_argument("--batch-size", type=int, default=2000,
                   help="most events the projector reads (and writes the rows of) per batch")
    # --rebuild, --truncate and --until-idle are operations, not settings.
    knobs.from_environment(p, "SPOTREEL_PROJECTOR_", skip=("rebuild", "truncate", "until_idle"))
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.services.projector.service import build, events_deadletter_topic, ensure_deadletter_topic

    logging.basicConfig(level=logging.INFO, format="%(asctime)s projector %(levelname)s %(message)s")
    from spotreel.runtime import tracing

    tracing.setup("projector")
    if args.truncate and not args.rebuild:
        print("spotreel projector: --truncate only goes with --rebuild", file=sys.stderr)
        return 2
    ensure_deadletter_topic(settings)
    from spotreel.runtime import gctune

    gctune.install(settings.gc_threshold)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with build(settings, rebuild=args.rebuild, until_idle=args.until_idle, truncate=args.truncate,
               metrics_port=args.metrics_port, batch_size=args.batch_size) as projector:
        stats = projector.run(stop)
    print(f"projector: {stats.events} events, {stats.rejections} rejections, {stats.dead_lettered} dead-lettered "
          f"({events_deadletter_topic(settings)}), {stats.writes} writes in {stats.batches} batches, "
          f"{stats.replayed_histories} job states restored from events_by_job", flush=True)
    return 0
