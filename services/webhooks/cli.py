"""`spotreel webhooks`: deliver signed webhooks for jobs submitted with a callback_url, until SIGTERM; the same
process runs the janitor (services/janitor: checkpoint and video deletion) unless --no-janitor.

The janitor comes in as a `Companion` that the `spotreel` command (libs/spotreel/cli.py) hands to `register`:
the services are independent of each other (tools/import-walls.toml), so this one never imports the janitor;
the entry point above both composes them."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from functools import partial
from typing import Any, Awaitable, Callable, Protocol

from spotreel.config import knobs
from spotreel.config.settings import Settings


class Loop(Protocol):
    def run(self, stop: asyncio.Event) -> Awaitable[Any]: ...


# A loop that shares this process: given the settings and the notifier's Cassandra session, it runs until
# `stop` is set.
Companion = Callable[[Settings, Any], Loop]


def register(sub: argparse._SubParsersAction, companion: Companion | None = None) -> None:
    """`companion`: what runs beside the notifier unless --no-janitor (the janitor, from the `spotreel` command)."""
    p = sub.add_parser("webhooks", help="deliver signed webhooks on terminal job states (callback_url)")
    p.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus metrics on 127.0.0.1:PORT")
    p.add_argument("--max-attempts", type=int, default=8, help="attempts per webhook before giving up")
    p.add_argument("--backoff-base", type=float, default=1.0, help="first retry delay ceiling, seconds")
    p.add_argument("--backoff-cap", type=float, default=300.0, help="largest retry delay ceiling, seconds")
    p.add_argument("--no-janitor", action="store_true",
                   help="do not run the janitor (checkpoint and video deletion, services/janitor) in this process")
    knobs.from_environment(p, "SPOTREEL_WEBHOOKS_")
    p.set_defaults(func=partial(_run, companion=companion))


async def _main(settings: Settings, args: argparse.Namespace, companion: Companion | None) -> None:
    from spotreel.services.webhooks.backoff import RetryPolicy
    from spotreel.services.webhooks.service import build

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    policy = RetryPolicy(max_attempts=args.max_attempts, base_s=args.backoff_base, cap_s=args.backoff_cap)
    with build(settings, policy, metrics_port=args.metrics_port) as notifier:
        logging.getLogger("spotreel.webhooks").info(
            "delivering webhooks from %s (private addresses %s)", notifier.config.events_topic,
            "allowed" if notifier.config.allow_private else "refused")
        loops = [notifier.run(stop)]
        if companion is not None and not args.no_janitor:
            loops.append(companion(settings, notifier.store.session).run(stop))
        await asyncio.gather(*loops)


def _run(args: argparse.Namespace, settings: Settings, companion: Companion | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s webhooks %(levelname)s %(message)s")
    from spotreel.runtime import gctune

    gctune.install(settings.gc_threshold)
    try:
        asyncio.run(_main(settings, args, companion))
    except ValueError as exc:
        print(f"spotreel webhooks: {exc}")
        return 2
    return 0
