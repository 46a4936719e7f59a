"""`spotreel slo`: the seeds' SLOs measured on a run's events topic (slo.py), with the submit ack from a
Prometheus that scraped the run's gateway when `--prometheus` is given."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from spotreel.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("slo", help="SLO report (pickup, completion, preemption recovery, P0 start, ack) "
                                   "from a run's events topic")
    p.add_argument("--prefix", help="topic prefix of the run (default SPOTREEL_TOPIC_PREFIX)")
    p.add_argument("--partitions", type=int, help="partitions of its events topic (default SPOTREEL_PARTITIONS)")
    p.add_argument("--p0-priority", type=int, default=9, help="priority of the P0 tier (default 9, the highest)")
    p.add_argument("--prometheus", metavar="URL",
                   help="read the submit ack (POST /v1/videos) from this Prometheus, e.g. http://127.0.0.1:9590")
    p.add_argument("--window", default="1h", help="range of the ack query (PromQL duration, default 1h)")
    p.add_argument("--submitted", metavar="FROM_MS:TO_MS",
                   help="only jobs submitted within this window (epoch ms; e.g. a ramp stage's from_ms:to_ms "
                        "from `spotreel simulate --out`)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON document")
    p.set_defaults(func=_run)


def ack_from_prometheus(url: str, window: str, timeout: float = 10.0) -> dict[str, float | None]:
    """p50 and p99 of the gateway's POST /v1/videos latency over `window`; None where there is no sample."""
    import math
    import urllib.request
    from urllib.parse import urlencode

    out: dict[str, float | None] = {}
    for q in (0.5, 0.99):
        promql = (f'histogram_quantile({q}, sum by (le) (increase(spotreel_gateway_request_seconds_bucket'
                  f'{{method="POST",route="/v1/videos",status="202"}}[{window}])))')
        with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/query?{urlencode({'query': promql})}",
                                    timeout=timeout) as resp:
            result = json.load(resp)["data"]["result"]
        value = float(result[0]["value"][1]) if result else None
        out[f"p{q * 100:g}"] = None if value is None or math.isnan(value) else value
    return out


def _run(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.services.capacity.sim_stack import read_events
    from spotreel.services.capacity.slo import render_text, report

    window = None
    if args.submitted:
        try:
            lo, hi = (int(x) for x in args.submitted.split(":"))
        except ValueError:
            print(f"spotreel slo: --submitted: use FROM_MS:TO_MS, got {args.submitted!r}", file=sys.stderr)
            return 2
        window = (lo, hi)
    if args.prefix:
        settings = dataclasses.replace(settings, topic_prefix=args.prefix)
    if args.partitions:
        settings = dataclasses.replace(settings, partitions=args.partitions)
    try:
        events = read_events(settings)
        ack: Any = ack_from_prometheus(args.prometheus, args.window) if args.prometheus else None
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        print(f"spotreel slo: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    rep = report(events, ack, args.p0_priority, window)
    if window is not None:
        rep["submitted_window_ms"] = list(window)
    rep["events_read"] = len(events)
    rep["topic_prefix"] = settings.topic_prefix
    print(json.dumps(rep, indent=1) if args.json else
          f"{len(events)} events of {settings.topic_prefix}.events\n{render_text(rep)}")
    return 0
