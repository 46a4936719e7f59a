"""`spotreel capacity`: keep a pool's fleet sized to its queue (floor, ceiling, warm idle buffer, cooldowns)."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from spotreel.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("capacity", help="add and drain workers of a pool from its queue and statistics")
    p.add_argument("--pool", default="tiny-t2v@cpu", help="MODEL@GPU_TYPE (default: the local stack's pool)")
    p.add_argument("--provider", choices=["local"], default="local",
                   help="local: real worker processes on this machine")
    p.add_argument("--floor", type=int, default=0)
    p.add_argument("--ceiling", type=int, default=2)
    p.add_argument("--idle-buffer", type=int, default=1, help="warm idle workers kept beyond the demand")
    p.add_argument("--target-wait", type=float, default=120.0, help="seconds a queued job may wait")
    p.add_argument("--up-cooldown", type=float, default=5.0)
    p.add_argument("--down-cooldown", type=float, default=60.0)
    p.add_argument("--cold-start", type=float, default=60.0,
                   help="seconds a new worker may take to load its model before it counts as idle")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between decisions")
    p.add_argument("--worker-argv", nargs="+", default=None,
                   help="command that starts one worker; {pool} and {worker_id} are filled in")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.infra.cassandra import cql_session
    from spotreel.services.capacity.manager import Manager
    from spotreel.services.capacity.policy import CapacityConfig
    from spotreel.services.capacity.providers import LocalProvider
    from spotreel.services.capacity.stats import PoolStatsReader
    from spotreel.services.capacity.workers import status_lookup

    logging.basicConfig(level=logging.INFO, format="%(asctime)s capacity %(levelname)s %(message)s")
    try:
        cfg = CapacityConfig(floor=args.floor, ceiling=args.ceiling, idle_buffer=args.idle_buffer,
                             target_wait_s=args.target_wait, up_cooldown_s=args.up_cooldown,
                             down_cooldown_s=args.down_cooldown)
    except ValueError as exc:
        print(f"spotreel capacity: {exc}")
        return 2
    safe = args.pool.replace("@", "_")
    provider = LocalProvider(args.pool, settings.run_dir / "capacity" / safe, settings.logs_dir / "workers",
                             argv=args.worker_argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stats = PoolStatsReader(settings)
    try:
        with cql_session(settings, keyspace=settings.cassandra_keyspace) as session:
            mgr = Manager(args.pool, cfg, stats, provider, status_lookup(session), cold_start_s=args.cold_start)
            mgr.run(args.interval, stop.is_set)
        print(f"capacity: added {mgr.added}, drained {mgr.drained}, preemption notices {mgr.preempted}; "
              f"stopping the {len(provider.workers())} workers it runs", flush=True)
    finally:
        stats.close()
        provider.close()
    return 0
