"""`spotreel gateway` (serve the public API on 127.0.0.1) and `spotreel tenant create NAME`."""

from __future__ import annotations

import argparse
import sys

from spotreel.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gateway", help="serve the public HTTP API on settings.host:settings.gateway_port")
    p.add_argument("--port", type=int, default=None, help="override SPOTREEL_GATEWAY_PORT")
    p.add_argument("--metrics-port", type=int, default=0,
                   help="serve Prometheus metrics on settings.host:PORT, apart from the public API (0: off)")
    p.set_defaults(func=_serve)
    t = sub.add_parser("tenant", help="manage tenants")
    tsub = t.add_subparsers(dest="tenant_command", metavar="ACTION")
    tsub.required = True
    c = tsub.add_parser("create", help="create a tenant (if missing) and print a new API key once")
    c.add_argument("name")
    c.add_argument("--rate-per-minute", type=int, default=600)
    c.add_argument("--max-in-flight", type=int, default=100)
    c.set_defaults(func=_create_tenant)
    ws = tsub.add_parser("webhook-secret", help="make (or --rotate) the tenant's webhook signing secret; shown once")
    ws.add_argument("name")
    ws.add_argument("--rotate", action="store_true", help="replace an existing secret")
    ws.set_defaults(func=_webhook_secret)
    w = sub.add_parser("worker-key", help="manage worker keys (credentials for the /internal worker API)")
    wsub = w.add_subparsers(dest="worker_key_command", metavar="ACTION")
    wsub.required = True
    wc = wsub.add_parser("create", help="create a worker key and print it once (only its SHA-256 is stored)")
    wc.add_argument("name")
    wc.set_defaults(func=_create_worker_key)


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.services.gateway.service import serve

    return serve(settings, port=args.port, metrics_port=args.metrics_port)


def _create_tenant(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.infra.cassandra import cql_session
    from spotreel.services.gateway.tenants import create_tenant, create_webhook_secret

    try:
        with cql_session(settings, keyspace=settings.cassandra_keyspace) as session:
            key = create_tenant(session, args.name, args.rate_per_minute, args.max_in_flight)
            secret = create_webhook_secret(session, args.name)
    except ValueError as exc:
        print(f"spotreel tenant create: {exc}", file=sys.stderr)
        return 2
    print(f"tenant {args.name}: API key (shown once, store it now):\n{key}")
    if secret is not None:
        print(f"webhook signing secret (shown once, store it now):\n{secret}")
    return 0


def _webhook_secret(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.infra.cassandra import cql_session
    from spotreel.services.gateway.tenants import create_webhook_secret

    try:
        with cql_session(settings, keyspace=settings.cassandra_keyspace) as session:
            secret = create_webhook_secret(session, args.name, rotate=args.rotate)
    except ValueError as exc:
        print(f"spotreel tenant webhook-secret: {exc}", file=sys.stderr)
        return 2
    if secret is None:
        print(f"spotreel tenant webhook-secret: {args.name} already has a secret; --rotate replaces it",
              file=sys.stderr)
        return 1
    print(f"tenant {args.name}: webhook signing secret (shown once, store it now):\n{secret}")
    return 0


def _create_worker_key(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.infra.cassandra import cql_session
    from spotreel.services.gateway.tenants import create_worker_key

    try:
        with cql_session(settings, keyspace=settings.cassandra_keyspace) as session:
            key = create_worker_key(session, args.name)
    except ValueError as exc:
        print(f"spotreel worker-key create: {exc}", file=sys.stderr)
        return 2
    print(f"worker key {args.name} (shown once, store it now):\n{key}")
    return 0
