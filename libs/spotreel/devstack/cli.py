"""`spotreel infra fetch|up|down|status`: the local stack from the command line.

Every failure ends as one clear line on stderr (plus optional indented hints) and a non-zero exit,
never as a traceback: InfraError carries the line, anything unexpected is summarised the same way.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import traceback
from typing import Callable, NoReturn

from spotreel.platform.errors import InfraError
from spotreel.devstack.settings import launcher_settings
from spotreel.config.settings import Settings

ACTIONS = ("fetch", "up", "down", "status")


def _say(line: str) -> None:
    print(line, flush=True)


def _fetch(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.devstack.maven import fetch

    fetch(settings, _say)
    return 0


def _up(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.devstack.cluster import profile
    from spotreel.devstack.stack import up

    settings = profile(settings, args.nodes, fresh=args.fresh)
    if args.replicas is not None:  # several processes per service (devstack/replicas.py)
        from spotreel.devstack.replicated import apply

        apply(settings, args.replicas, _say)
    up(settings, fresh=args.fresh, say=_say)
    return _monitoring_up(settings) if args.with_monitoring else 0


def _down(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.devstack.cluster import profile
    from spotreel.devstack.stack import down

    down(profile(settings, None), say=_say)
    return 0


def _provision(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.devstack.stack import provision

    provision(settings, timeout=args.timeout, say=_say)
    return 0


def _monitoring_up(settings: Settings) -> int:
    from spotreel.devstack.monitoring import Alertmanager, Prometheus

    prom, am = Prometheus(settings), Alertmanager(settings)
    for server in (am, prom):
        for message, holder in ([] if server.running() else server.port_conflicts()):
            print(f"{message}{'; ' + holder if holder else ''}", flush=True)
            return 1
        server.preflight()
    am.ensure_up(_say)  # first: Prometheus sends its alerts there from its first evaluation
    # The stack's own services (devstack/services.py), every replica of each; workers and others: add files.
    from spotreel.devstack.replicated import metrics_targets

    for name, targets in metrics_targets(settings).items():
        # topic_prefix: which stack a series is from (`spotreel slo` selects its gateway's by it)
        prom.write_targets(name, targets, {"service": name, "topic_prefix": settings.topic_prefix})
    prom.ensure_up(_say)
    _say(f"prometheus: scrape targets go in {prom.targets_dir}/*.json (file_sd); rules from monitoring/alerts.yml")
    _say(f"prometheus: operator view at {prom.console_url()}; alerts in {am.address()} (monitoring/alertmanager.yml)")
    return 0


def _monitoring(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.devstack.monitoring import Alertmanager, Prometheus

    if args.monitoring_command == "up":
        return _monitoring_up(settings)
    servers = [Prometheus(settings), Alertmanager(settings)]
    if args.monitoring_command == "down":
        for server in servers:
            server.stop(_say)
        return 0
    entries = [server.health() for server in servers]
    healthy = all(e["healthy"] for e in entries)
    if args.json:
        print(json.dumps({"healthy": healthy, "components": entries}), flush=True)
    for e in [] if args.json else entries:
        print(f"{e['name']}: {e['state']} at {e['address']} ({e['detail']}); log {e['log']}", flush=True)
    return 0 if healthy else 1


def _status(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.devstack.cluster import profile
    from spotreel.devstack.status import collect, render_json, render_text

    report = collect(profile(settings, None))
    print(render_json(report) if args.json else render_text(report), flush=True)
    return 0 if report["healthy"] else 1


def _quiet_client_libraries() -> None:
    # The drivers log every refused connection while a server starts; our own lines say what matters.
    for name in ("cassandra", "botocore", "boto3", "urllib3", "s3transfer"):
        lib = logging.getLogger(name)
        lib.addHandler(logging.NullHandler())
        lib.propagate = False


def _guarded(action: str, handler: Callable[[argparse.Namespace, Settings], int]):
    def run(args: argparse.Namespace, settings: Settings) -> int:
        _quiet_client_libraries()
        try:
            # The launcher's knobs (JVM heaps, versions, internal ports) join the runtime settings here.
            return handler(args, launcher_settings(settings))
        except InfraError as exc:
            for line in exc.lines():
                print(line, file=sys.stderr, flush=True)
            return 1
        except KeyboardInterrupt:
            print(f"spotreel infra {action}: interrupted", file=sys.stderr)
            return 130
        except Exception as exc:
            print(f"spotreel infra {action}: unexpected {type(exc).__name__}: {exc}", file=sys.stderr)
            if settings.debug:
                traceback.print_exc()
            else:
                print("  set SPOTREEL_DEBUG=1 to see the traceback", file=sys.stderr)
            return 1

    return run


def _one_line_error(prog: str) -> Callable[[str], NoReturn]:
    def error(message: str) -> NoReturn:
        if "invalid choice" in message:
            bad = message.split("invalid choice:", 1)[1].split("(", 1)[0].strip()
            message = f"unknown command {bad} (choose from {', '.join(ACTIONS)})"
        elif "required" in message:
            message = f"missing command (choose from {', '.join(ACTIONS)})"
        print(f"{prog}: {message}", file=sys.stderr)
        raise SystemExit(2)

    return error


def register(sub: argparse._SubParsersAction) -> None:
    infra = sub.add_parser("infra", help="run the local stack: Kafka, Cassandra, S3",
                           description="Run the local stack (Kafka, Cassandra, SeaweedFS S3) under SPOTREEL_HOME.")
    # argparse would print the whole usage block before its error; a wrong action deserves one line.
    infra.error = _one_line_error("spotreel infra")  # type: ignore[method-assign]
    isub = infra.add_subparsers(dest="infra_command", metavar="ACTION")
    isub.required = True

    p = isub.add_parser("fetch", help="download the Kafka and Cassandra jars into the cache (once)")
    p.set_defaults(func=_guarded("fetch", _fetch))
    p = isub.add_parser("up", help="start everything and wait until it answers (no-op when it runs)")
    p.add_argument("--fresh", action="store_true", help="stop the stack and wipe its data first")
    p.add_argument("--nodes", type=int, default=None, metavar="N",
                   help="Kafka brokers and Cassandra nodes (the cluster profile: 3, replication factor 3); "
                   "default: what this home has, else 1")
    p.add_argument("--with-monitoring", action="store_true",
                   help="also start Prometheus and Alertmanager on loopback (same as `infra monitoring up`)")
    p.add_argument("--replicas", metavar="SERVICE=N,...",
                   help="processes per service (gateway, scheduler, projector, webhooks; default 1 each; several "
                   "gateways sit behind HAProxy on the gateway's address); kept until another --replicas")
    p.set_defaults(func=_guarded("up", _up))
    p = isub.add_parser("down", help="stop what `up` started; no listener is left on our ports")
    p.set_defaults(func=_guarded("down", _down))
    p = isub.add_parser("provision", help="create topics, buckets and schema on servers already running "
                        "elsewhere (Docker Compose, a shared cluster)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for each server to answer")
    p.set_defaults(func=_guarded("provision", _provision))
    p = isub.add_parser("monitoring", help="Prometheus and Alertmanager on loopback (Debian's prometheus and "
                        "prometheus-alertmanager packages): up, down, status")
    p.add_argument("monitoring_command", choices=["up", "down", "status"])
    p.add_argument("--json", action="store_true", help="machine-readable status")
    p.set_defaults(func=_guarded("monitoring", _monitoring))
    p = isub.add_parser("status", help="health, address, pid and log of each component; exit 0 when all healthy")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_guarded("status", _status))
