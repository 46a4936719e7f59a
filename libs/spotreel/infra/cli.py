"""`spotreel infra fetch|up|down|status`: placeholder until the infra tooling lands."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    infra = sub.add_parser("infra", help="run the local stack: Kafka, Cassandra, S3")
    isub = infra.add_subparsers(dest="infra_command", metavar="ACTION")
    isub.required = True
    for name in ("fetch", "up", "down", "status"):
        p = isub.add_parser(name)
        p.set_defaults(func=lambda args, settings: 1)
