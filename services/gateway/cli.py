"""`spotreel gateway` (serve the public API on 127.0.0.1), `spotreel tenant create|set|list|disable|enable|
webhook-secret`, `spotreel usage`, `spotreel worker-key create|list|revoke`, `spotreel erase video|tenant` and
`spotreel keys check|rotate|new`."""

from __future__ import annotations

import argparse
import sys

from spotreel.config import knobs
from spotreel.config.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gateway", help="serve the public HTTP API on 127.0.0.1 (SPOTREEL_HOST) at SPOTREEL_GATEWAY_PORT (18700)")
    p.add_argument("--port", type=int, default=None, help="override SPOTREEL_GATEWAY_PORT")
    p.add_argument("--metrics-port", type=int, default=0,
                   help="serve Prometheus metrics on this port of the same host, apart from the public API (0: off)")
    # --port is Settings' SPOTREEL_GATEWAY_PORT; the policy knobs are GatewayConfig's SPOTREEL_GATEWAY_<NAME>.
    knobs.from_environment(p, "SPOTREEL_GATEWAY_", skip=("port",))
    p.set_defaults(func=_serve)
    t = sub.add_parser("tenant", help="manage tenants")
    tsub = t.add_subparsers(dest="tenant_command", metavar="ACTION")
    tsub.required = True
    c = tsub.add_parser("create", help="create a tenant (if missing) and print a new API key once")
    c.add_argument("name")
    _plan_arguments(c)
    c.set_defaults(func=_create_tenant)
    st = tsub.add_parser("set", help="change a tenant's plan or settings; the gateway and the scheduler apply it "
                                     "without a restart")
    st.add_argument("name")
    _plan_arguments(st)
    st.set_defaults(func=_set_tenant)
    ws = tsub.add_parser("webhook-secret", help="make (or --rotate) the tenant's webhook signing secret; shown once")
    ws.add_argument("name")
    ws.add_argument("--rotate", action="store_true",
                    help="replace an existing secret; the old one still signs beside it for --keep-previous seconds")
    ws.add_argument("--keep-previous", type=int, default=None, metavar="SECONDS",
                    help="with --rotate: how long the replaced secret keeps signing too (default 86400, one day; "
                         "0: it stops at once)")
    ws.set_defaults(func=_webhook_secret)
    tl = tsub.add_parser("list", help="every tenant: plan, weight, in-flight ceiling, rate, highest priority, "
                                      "disabled, whether it has a webhook secret, created")
    tl.add_argument("--json", action="store_true", help="one JSON object per tenant and line")
    tl.set_defaults(func=_list_tenants)
    for verb, said in (("disable", "refuse every request of the tenant's API keys (403 tenant_disabled) within "
                                   "the gateway's key cache time, 30 s by default; its videos keep running"),
                       ("enable", "accept a disabled tenant's API keys again")):
        td = tsub.add_parser(verb, help=said)
        td.add_argument("name")
        td.set_defaults(func=_disable_tenant, disabled=verb == "disable")
    u = sub.add_parser("usage", help="GPU-seconds per tenant (operators): the scheduler's tenant-usage reports; "
                                     "--mine: your own tenant's, from GET /v1/usage")
    u.add_argument("--tenant", default=None, help="only this tenant")
    u.add_argument("--json", action="store_true", help="one JSON object per tenant and line (--mine: the API's "
                                                       "answer)")
    u.add_argument("--mine", action="store_true", help="ask the gateway (GET /v1/usage) for the API key's own "
                                                       "tenant instead of reading the topic")
    u.add_argument("--url", help="with --mine: gateway URL (default: the local stack's)")
    u.add_argument("--key", help="with --mine: API key (default: the local stack's development key)")
    u.set_defaults(func=_usage)
    w = sub.add_parser("worker-key", help="manage worker keys (credentials for the /internal worker API)")
    wsub = w.add_subparsers(dest="worker_key_command", metavar="ACTION")
    wsub.required = True
    wc = wsub.add_parser("create", help="create a worker key and print it once (only its SHA-256 is stored)")
    wc.add_argument("name")
    wc.set_defaults(func=_create_worker_key)
    wl = wsub.add_parser("list", help="every worker key: name, first characters, created, revoked (never the key)")
    wl.add_argument("--json", action="store_true", help="one JSON object per key and line")
    wl.set_defaults(func=_list_worker_keys)
    wr = wsub.add_parser("revoke", help="revoke the live worker keys of this name: the worker API refuses them "
                                        "(401) within the gateway's key cache time, 30 s by default")
    wr.add_argument("name")
    wr.add_argument("--prefix", help="only the key starting with these characters (as `worker-key list` shows)")
    wr.set_defaults(func=_revoke_worker_key)
    e = sub.add_parser("erase", help="erase personal data (operators): data keys, videos, checkpoints, and a "
                                     "JobErased per video; the prompt cannot be read back from anything kept")
    esub = e.add_subparsers(dest="erase_command", metavar="WHAT")
    esub.required = True
    ev_ = esub.add_parser("video", help="erase one video (any tenant's); a running one is cancelled first")
    ev_.add_argument("job_id")
    ev_.add_argument("--by", default="operator", help="who asks, recorded in JobErased as operator:<BY> "
                                                      "(default operator)")
    ev_.set_defaults(func=_erase, what="video")
    et = esub.add_parser("tenant", help="erase every video and schedule of a tenant (a tenant that leaves)")
    et.add_argument("name")
    et.add_argument("--by", default="operator", help="who asks, recorded in JobErased as operator:<BY> "
                                                     "(default operator)")
    et.set_defaults(func=_erase, what="tenant")
    k = sub.add_parser("keys", help="the key-encryption key that wraps the data keys (operators)")
    ksub = k.add_subparsers(dest="keys_command", metavar="ACTION")
    ksub.required = True
    kc = ksub.add_parser("check", help="open the keystore with SPOTREEL_KEK_FILE and say whether it is the keystore's "
                                       "key (exit 1 if not); prints key ids only, never key material")
    kc.set_defaults(func=_keys, action="check")
    kr = ksub.add_parser("rotate", help="re-wrap every data key under a new KEK file (the events topic is not "
                                        "touched); then set SPOTREEL_KEK_FILE to it")
    kr.add_argument("new_kek_file", help="the new KEK: 32 random bytes, base64 (`spotreel keys new FILE` makes one)")
    kr.set_defaults(func=_keys, action="rotate")
    kn = ksub.add_parser("new", help="write a new random KEK file (mode 0600) unless the file exists")
    kn.add_argument("path")
    kn.set_defaults(func=_keys, action="new")


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.api.config import from_env
    from spotreel.services.gateway.service import serve

    try:
        config = from_env()
    except ValueError as exc:
        print(f"spotreel gateway: {exc}", file=sys.stderr)
        return 2
    return serve(settings, port=args.port, metrics_port=args.metrics_port, config=config)


def _plan_arguments(p: argparse.ArgumentParser) -> None:
    from spotreel.domain.plans import PLANS

    p.add_argument("--plan", choices=sorted(PLANS), default=None,
                   help="set weight, in-flight ceiling, rate and highest priority from this plan; the options "
                        "below override single values")
    p.add_argument("--weight", type=float, default=None, help="fair-share weight (> 0)")
    p.add_argument("--max-in-flight", type=int, default=None,
                   help="ceiling on the tenant's concurrent leases (GPUs) across the pool")
    p.add_argument("--rate-per-minute", type=int, default=None, help="submissions per minute")
    p.add_argument("--max-priority", type=int, default=None, help="highest priority the tenant may ask for (0-9)")


def _overrides(args: argparse.Namespace) -> dict:
    return {"weight": args.weight, "max_in_flight": args.max_in_flight, "rate_per_minute": args.rate_per_minute,
            "max_priority": args.max_priority}


def _publish(settings: Settings, name: str, plan, command: str) -> int:
    from spotreel.tenancy import publish_settings, settings_record

    try:
        publish_settings(settings, settings_record(name, plan))
    except RuntimeError as exc:
        print(f"spotreel tenant {command}: {exc}; the scheduler keeps the previous settings until "
              f"`spotreel tenant set {name}` is run again", file=sys.stderr)
        return 1
    limit = "none" if plan.max_in_flight is None else plan.max_in_flight
    print(f"tenant {name}: plan {plan.name}, weight {plan.weight:g}, max in flight {limit}, "
          f"{plan.rate_per_minute}/min, priority up to {plan.max_priority}")
    return 0


def _create_tenant(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.domain.plans import settings_for
    from spotreel.platform.cql import cql_session
    from spotreel.tenancy import create_tenant, create_webhook_secret, tenant_plan

    try:
        plan = settings_for(args.plan, **_overrides(args))
        with cql_session(settings, keyspace=settings.cassandra_keyspace) as session:
            key = create_tenant(session, args.name, plan.rate_per_minute, plan.max_in_flight, plan.weight,
                                plan=args.plan and plan.name, max_priority=plan.max_priority)
            secret = create_webhook_secret(session, args.name)
            stored = tenant_plan(session, args.name)  # an existing tenant keeps its settings
    except ValueError as exc:
        print(f"spotreel tenant create: {exc}", file=sys.stderr)
        return 2
    print(f"tenant {args.name}: API key (shown once, store it now):\n{key}")
    if secret is not None:
        print(f"webhook signing secret (shown once, store it now):\n{secret}")
    return _publish(settings, args.name, stored or plan, "create")


def _set_tenant(args: argparse.Namespace, settings: Settings) -> int:
    """From the plan given, else from the tenant's current settings, with the options given on top."""
    from dataclasses import replace

    from spotreel.domain.plans import plan_problem, settings_for
    from spotreel.platform.cql import cql_session
    from spotreel.tenancy import set_tenant, tenant_plan

    try:
        with cql_session(settings, keyspace=settings.cassandra_keyspace) as session:
            current = tenant_plan(session, args.name)
            if current is None:
                raise ValueError(f"no tenant named {args.name!r}")
            if args.plan is not None:
                plan = settings_for(args.plan, **_overrides(args))
            else:
                plan = replace(current, **{k: v for k, v in _overrides(args).items() if v is not None})
                problem = plan_problem(plan.weight, plan.max_in_flight, plan.rate_per_minute, plan.max_priority)
                if problem is not None:
                    raise ValueError(problem)
            set_tenant(session, args.name, plan)
    except ValueError as exc:
        print(f"spotreel tenant set: {exc}", file=sys.stderr)
        return 2
    return _publish(settings, args.name, plan, "set")


def _webhook_secret(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.platform.cql import cql_session
    from spotreel.tenancy import create_webhook_secret

    try:
        with cql_session(settings, keyspace=settings.cassandra_keyspace) as session:
            if args.keep_previous is not None and (not args.rotate or args.keep_previous < 0):
                raise ValueError("--keep-previous takes --rotate and a number of seconds >= 0")
            keep = {} if args.keep_previous is None else {"keep_previous_s": args.keep_previous}
            secret = create_webhook_secret(session, args.name, rotate=args.rotate, **keep)
    except ValueError as exc:
        print(f"spotreel tenant webhook-secret: {exc}", file=sys.stderr)
        return 2
    if secret is None:
        print(f"spotreel tenant webhook-secret: {args.name} already has a secret; --rotate replaces it",
              file=sys.stderr)
        return 1
    print(f"tenant {args.name}: webhook signing secret (shown once, store it now):\n{secret}")
    return 0


def _usage(args: argparse.Namespace, settings: Settings) -> int:
    import json
    import time

    from spotreel.services.gateway.public.usage import read_reports, usage_table

    if args.mine or args.url or args.key:
        if args.tenant is not None or not args.mine:
            print("spotreel usage: --url and --key go with --mine, which answers for the key's own tenant "
                  "(no --tenant)", file=sys.stderr)
            return 2
        from spotreel.client.cli import _runner
        from spotreel.client.commands import my_usage

        return _runner("usage", my_usage)(args, settings)
    hl = settings.fair_share_half_life_s * 1000 if settings.fair_share_half_life_s > 0 else None
    try:
        reports = read_reports(settings)
    except Exception as exc:  # noqa: BLE001 - Kafka unreachable or slow: say so, one line
        print(f"spotreel usage: cannot read the tenant usage topic: {exc}", file=sys.stderr)
        return 1
    rows = [r for r in usage_table(reports, int(time.time() * 1000), hl)
            if args.tenant is None or r["tenant"] == args.tenant]
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True))
        return 0
    print(f"{'tenant':<24} {'used GPU-s':>12} {'wasted GPU-s':>13} {'fair-share GPU-s':>17} {'leases held':>12}")
    for row in rows:
        print(f"{row['tenant']:<24} {row['used_gpu_seconds']:>12.1f} {row['wasted_gpu_seconds']:>13.1f} "
              f"{row['fair_share_gpu_seconds']:>17.1f} {row['leases_held']:>12}")
    if not rows:
        print("(no usage reported yet)")
    return 0


def _erase(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.adapters.kafka import producer
    from spotreel.adapters.partitioning import partition_for
    from spotreel.codec import Codec
    from spotreel.personal.operator import Eraser, tenant_of
    from spotreel.personal.setup import open_cassandra_vault
    from spotreel.platform.cql import cql_session
    from spotreel.platform.s3 import s3_client
    from spotreel.platform.topics import commands_topic

    prod, codec = producer(settings, acks="all"), Codec.default()

    def send(command) -> None:
        key = getattr(command, "job_id", None) or command.schedule_id
        outcome: list = []
        prod.produce(commands_topic(settings), key=key.encode(), value=codec.encode_message(command),
                     partition=partition_for(key, settings.partitions), on_delivery=lambda err, _m: outcome.append(err))
        prod.flush(15)
        if not outcome or outcome[0] is not None:
            raise RuntimeError(f"{type(command).__name__} for {key} was not acknowledged by Kafka")

    by = f"operator:{args.by}"
    with cql_session(settings, keyspace=settings.cassandra_keyspace) as session:
        vault = open_cassandra_vault(settings, session)
        eraser = Eraser(settings, session, vault, s3_client(settings), send)
        if args.what == "video":
            tenant = tenant_of(session, vault, args.job_id)
            if tenant is None:
                print(f"spotreel erase video: no video {args.job_id}", file=sys.stderr)
                return 2
            done = eraser.job(args.job_id, tenant, by)
        else:
            done = eraser.tenant(args.name, by)
    print(f"erased {len(done.jobs)} video(s) and {len(done.schedules)} schedule(s); {done.objects} object(s) deleted")
    return 0


def _keys(args: argparse.Namespace, settings: Settings) -> int:
    from pathlib import Path

    from spotreel.personal.kek import KekError, create_kek_file
    from spotreel.personal.operator import rotate
    from spotreel.personal.setup import open_vault
    from spotreel.personal.keystore import CassandraKeystore
    from spotreel.platform.cql import cql_session

    if args.action == "new":
        made = create_kek_file(Path(args.path))
        print(f"{args.path}: {'written' if made else 'exists already, left as it is'}")
        return 0 if made else 1
    try:
        with cql_session(settings, keyspace=settings.cassandra_keyspace) as session:
            vault = open_vault(settings, CassandraKeystore(session))
            if args.action == "check":
                print(f"the keystore opens with {vault.kek.kek_id}")
                return 0
            n = rotate(vault, Path(args.new_kek_file))
    except KekError as exc:
        print(f"spotreel keys {args.action}: {exc}", file=sys.stderr)
        return 1
    print(f"re-wrapped {n} data key(s) under {vault.kek.kek_id}; set SPOTREEL_KEK_FILE={args.new_kek_file} "
          "(and SPOTREEL_KEK_PREVIOUS_FILE to the old file until every process restarted)")
    return 0


def _create_worker_key(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.platform.cql import cql_session
    from spotreel.tenancy import create_worker_key

    try:
        with cql_session(settings, keyspace=settings.cassandra_keyspace) as session:
            key = create_worker_key(session, args.name)
    except ValueError as exc:
        print(f"spotreel worker-key create: {exc}", file=sys.stderr)
        return 2
    print(f"worker key {args.name} (shown once, store it now):\n{key}")
    return 0


def _rows(rows: list[dict], as_json: bool, columns: tuple[str, ...], empty: str) -> int:
    import json

    if as_json:
        for row in rows:
            print(json.dumps(row, sort_keys=True))
        return 0
    if not rows:
        print(empty)
        return 0
    shown = [[("-" if row[c] is None else str(row[c])) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in shown)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    for r in shown:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    return 0


def _list_tenants(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.platform.cql import cql_session
    from spotreel.tenancy import list_tenants

    with cql_session(settings, keyspace=settings.cassandra_keyspace) as session:
        rows = list_tenants(session)
    return _rows(rows, args.json, ("tenant", "plan", "weight", "max_in_flight", "rate_per_minute", "max_priority",
                                   "disabled", "webhook_secret", "created_at"), "(no tenants)")


def _disable_tenant(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.platform.cql import cql_session
    from spotreel.tenancy import disable_tenant

    verb = "disable" if args.disabled else "enable"
    try:
        with cql_session(settings, keyspace=settings.cassandra_keyspace) as session:
            disable_tenant(session, args.name, args.disabled)
    except ValueError as exc:
        print(f"spotreel tenant {verb}: {exc}", file=sys.stderr)
        return 2
    print(f"tenant {args.name}: {verb}d")
    return 0


def _list_worker_keys(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.platform.cql import cql_session
    from spotreel.tenancy import list_worker_keys

    with cql_session(settings, keyspace=settings.cassandra_keyspace) as session:
        rows = list_worker_keys(session)
    return _rows(rows, args.json, ("name", "prefix", "created_at", "revoked_at"), "(no worker keys)")


def _revoke_worker_key(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.platform.cql import cql_session
    from spotreel.tenancy import revoke_worker_key

    with cql_session(settings, keyspace=settings.cassandra_keyspace) as session:
        n = revoke_worker_key(session, args.name, args.prefix)
    if n == 0:
        print(f"spotreel worker-key revoke: no live worker key named {args.name!r}"
              + (f" starting with {args.prefix!r}" if args.prefix else ""), file=sys.stderr)
        return 1
    print(f"worker key {args.name}: {n} revoked")
    return 0
