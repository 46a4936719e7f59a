"""The `spotreel` command: one argparse tree; each subcommand lives in the module that owns it."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Sequence

from spotreel.config import knobs
from spotreel.config.settings import Settings

# Each registrar adds its subparsers and sets `func(args, settings) -> int` on them.
Registrar = Callable[[argparse._SubParsersAction], None]


def _registrars() -> list[Registrar]:
    from spotreel.codec.cli import register as schemas
    from spotreel.demo.cli import register as demo
    from spotreel.devstack.cli import register as infra
    from spotreel.services.simulator.cli import register as simulate
    from spotreel.services.simulator.slo_cli import register as slo
    from spotreel.services.gateway.cli import register as gateway
    from spotreel.client.cli import register as client
    from spotreel.services.projector.cli import register as projector
    from spotreel.services.capacity.cli import register as capacity
    from spotreel.services.scheduler.cli import register as scheduler
    from spotreel.worker.model_cli import register as model
    from spotreel.worker.cli import register as worker
    from spotreel.services.webhooks.cli import register as webhooks_with
    from spotreel.services.janitor.service import build as janitor

    def webhooks(sub: argparse._SubParsersAction) -> None:
        # The janitor runs in the webhooks process (services/janitor/README.md); the services never import
        # each other, so the two are put together here.
        webhooks_with(sub, companion=janitor)

    return [infra, schemas, projector, scheduler, gateway, client, capacity, webhooks, simulate, slo, model, worker, demo]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spotreel", description="spotreel: text-to-video job backend")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for register in _registrars():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        # The service options opened to the environment (spotreel.config.knobs) become defaults; a flag still wins.
        knobs.apply(parser, os.environ)
    except ValueError as exc:
        print(f"spotreel: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        print(f"spotreel: {exc}", file=sys.stderr)
        return 2
    return int(args.func(args, settings) or 0)


if __name__ == "__main__":
    sys.exit(main())
