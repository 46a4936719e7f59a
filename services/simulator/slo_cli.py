"""`spotreel slo`: the seeds' SLOs measured on a run's events topic (slo.py), with the submit ack from a
Prometheus that scraped the run's gateway when `--prometheus` is given."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlencode

from spotreel.config.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("slo", help="SLO report (pickup, completion, preemption recovery, P0 start, ack) "
                                   "from a run's events topic")
    p.add_argument("--prefix", help="topic prefix of the run (default SPOTREEL_TOPIC_PREFIX)")
    p.add_argument("--partitions", type=int, help="partitions of its events topic (default SPOTREEL_PARTITIONS)")
    p.add_argument("--p0-priority", type=int, default=9, help="priority of the P0 tier (default 9, the highest)")
    p.add_argument("--prometheus", metavar="URL",
                   help="read the submit ack (POST /v1/videos) from this Prometheus, e.g. http://127.0.0.1:9590")
    p.add_argument("--window", help="range of the ack query ending now (PromQL duration, default 1h); with "
                                    "--submitted the ack query covers that window instead")
    p.add_argument("--submitted", metavar="FROM_MS:TO_MS",
                   help="only jobs submitted within this window (epoch ms; e.g. a ramp stage's from_ms:to_ms "
                        "from `spotreel simulate --out`)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON document")
    p.set_defaults(func=_run)




def ack_window(window: str | None, submitted: tuple[int, int] | None) -> tuple[str, float | None]:
    """The ack query's range and evaluation time: with `submitted` (epoch ms) exactly that window, ending at
    its end; else `window` (a PromQL duration, default 1h) ending now (time None)."""
    if submitted is not None:
        # In milliseconds: rounded up to whole seconds, the range reached up to a second before the window and
        # counted what was answered there.
        return f"{max(1, submitted[1] - submitted[0])}ms", submitted[1] / 1000
    return window or "1h", None


def counter_increase(values: list[float]) -> float:
    """What a counter counted between its first and last sample: every rise, and a fall taken as a restart
    that counted from 0. Unlike PromQL's increase(), nothing is extrapolated to the window's edges, so the
    figure is whole and each bucket of a histogram is counted alike."""
    total = 0.0
    for before, after in zip(values, values[1:]):
        total += after - before if after >= before else after
    return total


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """PromQL's histogram_quantile over cumulative `buckets` (upper bound -> count, +Inf included): the rank's
    bucket found, then linear interpolation inside it (the first bucket from 0); a rank in the +Inf bucket
    is the highest finite bound. None without observations or without +Inf."""
    bounds = sorted(buckets.items())
    if len(bounds) < 2 or not math.isinf(bounds[-1][0]):
        return None
    counts, top = [], 0.0
    for _, n in bounds:  # cumulative counts never fall (a bucket's samples scraped a moment apart may)
        top = max(top, n)
        counts.append(top)
    if counts[-1] <= 0:
        return None
    rank = q * counts[-1]
    b = next(i for i, n in enumerate(counts) if n >= rank)
    if b == len(bounds) - 1:
        return bounds[-2][0]
    lower, below = (bounds[b - 1][0], counts[b - 1]) if b > 0 else (0.0, 0.0)
    inside = counts[b] - below
    return lower + (bounds[b][0] - lower) * ((rank - below) / inside if inside > 0 else 1.0)


def ack_from_prometheus(url: str, window: str = "1h", at_s: float | None = None, prefix: str | None = None,
                        timeout: float = 10.0) -> dict[str, Any]:
    """The submit ack from the gateway's `spotreel_gateway_request_seconds` histogram (202s to POST /v1/videos)
    as Prometheus scraped it over `window` ending at `at_s` (epoch s; None: now): n, p50 and p99 from each
    series' samples in the window (`counter_increase`: what was counted between the window's first and last
    scrape, no extrapolation, so every bucket is counted alike and n is the acks answered), summed over the
    gateways, then `histogram_quantile`; the other answers to POST /v1/videos by status, and a note when there
    is no figure (no gateway series at all, or no 202 in the window). {"error": ...} when Prometheus did not
    answer. `prefix`: only the gateways whose scrape target has that topic_prefix label (`infra monitoring up`
    and `spotreel simulate` label theirs), so one Prometheus can scrape several stacks."""
    stack = f'topic_prefix="{prefix}"' if prefix is not None else ""
    ack = f'method="POST",route="/v1/videos",status="202"{"," + stack if stack else ""}'
    other = f'method="POST",route="/v1/videos",status!="202"{"," + stack if stack else ""}'

    def query(promql: str) -> list[dict[str, Any]]:
        params = {"query": promql, **({"time": f"{at_s:.3f}"} if at_s is not None else {})}
        try:
            with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/query?{urlencode(params)}",
                                        timeout=timeout) as resp:
                answer = json.load(resp)
        except urllib.error.HTTPError as exc:  # a bad query: Prometheus says why in the body
            try:
                answer = json.load(exc)
            except ValueError:
                answer = {"error": f"HTTP {exc.code}"}
        if answer.get("status") != "success":
            raise _PromError(f"{answer.get('errorType', 'error')}: {answer.get('error')}")
        return answer["data"]["result"]

    def counted(series: str, by: str) -> dict[str, float]:
        """Each label value of `by` -> what its series counted in the window (raw samples, summed)."""
        out: dict[str, float] = {}
        for r in query(f"{series}[{window}]"):
            key = r["metric"].get(by, "")
            out[key] = out.get(key, 0.0) + counter_increase([float(v) for _, v in r["values"]])
        return out

    try:
        buckets = {float(le): n for le, n in counted(f"spotreel_gateway_request_seconds_bucket{{{ack}}}", "le").items()}
        n = sum(counted(f"spotreel_gateway_request_seconds_count{{{ack}}}", "status").values()) if buckets else None
        out: dict[str, Any] = {"window": window, "at_s": at_s, "n": n}
        for q in (0.5, 0.99):
            out[f"p{q * 100:g}"] = histogram_quantile(q, buckets)
        others = counted(f"spotreel_gateway_request_seconds_count{{{other}}}", "status")
        out["other_statuses"] = {status: n for status, n in sorted(others.items())}
        if not n or out["p99"] is None:
            out["n"] = n or None
            seen = query(f"count(count_over_time(spotreel_gateway_request_seconds_count{{{stack}}}[{window}]))")
            out["note"] = ("no 202 to POST /v1/videos in the window" if seen else
                           f"this Prometheus has no spotreel_gateway_request_seconds{{{stack}}} series in the "
                           "window: is the gateway's metrics port (gateway port + 4) one of its targets, with that "
                           "label (`spotreel infra monitoring up` and `spotreel simulate` write it)?")
        return out
    except (urllib.error.URLError, OSError, ValueError, KeyError, _PromError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return {"error": f"Prometheus at {url} did not answer the ack query: {reason}"}


class _PromError(Exception):
    """Prometheus answered with an error (a bad --window, say)."""


def _run(args: argparse.Namespace, settings: Settings) -> int:
    from spotreel.services.simulator.stack import read_events
    from spotreel.services.simulator.slo import render_text, report

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
        ack: Any = ack_from_prometheus(args.prometheus, *ack_window(args.window, window),
                                       prefix=settings.topic_prefix) if args.prometheus else None
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        print(f"spotreel slo: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    rep = report(events, ack, args.p0_priority, window)
    if ack is not None and ack.get("error"):
        print(f"spotreel slo: {ack['error']}", file=sys.stderr)
    if window is not None:
        rep["submitted_window_ms"] = list(window)
    rep["events_read"] = len(events)
    rep["topic_prefix"] = settings.topic_prefix
    print(json.dumps(rep, indent=1) if args.json else
          f"{len(events)} events of {settings.topic_prefix}.events\n{render_text(rep)}")
    return 1 if ack is not None and ack.get("error") else 0
