"""`spotreel infra status`: each component's health, address, pid and log, plus what clients need."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from spotreel.devstack import sizes
from spotreel.devstack.layout import Layout
from spotreel.platform.seed import DEV_WORKER_KEY
from spotreel.devstack.stack import components
from spotreel.config.settings import Settings


def collect(settings: Settings, timeout: float = 3.0) -> dict[str, object]:
    comps = components(settings)
    with ThreadPoolExecutor(max_workers=len(comps), thread_name_prefix="infra-status") as pool:
        entries = list(pool.map(lambda c: c.health(timeout), comps))
    up = {e["name"] for e in entries if e["healthy"]}
    return {
        "healthy": all(e["healthy"] for e in entries),
        "home": str(Layout.of(settings).home),
        "components": entries,
        "gateway_url": settings.gateway_url,
        "dev_api_key": settings.dev_api_key,
        "dev_worker_key": DEV_WORKER_KEY,
        "kafka_bootstrap": settings.kafka_bootstrap,
        "cassandra_keyspace": settings.cassandra_keyspace,
        "s3_endpoint": settings.s3_endpoint,
        "topic_prefix": settings.topic_prefix,
        # Topic, job-table and bucket sizes (sizes.py): bounded state, watched.
        "sizes": sizes.collect(settings, timeout, kafka=any(n.split("-")[0] == "kafka" for n in up), s3="s3" in up),
    }


def render_text(report: dict[str, object]) -> str:
    comps: list[dict[str, object]] = report["components"]  # type: ignore[assignment]
    verdict = "healthy" if report["healthy"] else "NOT healthy"
    lines = [f"spotreel local stack ({report['home']}): {verdict}"]
    width = max(len(str(c["name"])) for c in comps)
    for c in comps:
        state = "ok" if c["healthy"] else str(c["state"])
        pid = f"pid {c['pid']}" if c["pid"] else "no pid"
        lines.append(f"  {str(c['name']):<{width}}  {state:<9}  {str(c['address']):<24}  {pid:<10}  {c['detail']}")
        lines.append(f"  {'':<{width}}  log: {c['log']}")
    lines.append(f"  gateway URL: {report['gateway_url']}")
    lines.append(f"  dev API key: {report['dev_api_key']}")
    if "sizes" in report:
        lines.extend(sizes.render(report["sizes"]))  # type: ignore[arg-type]
    return "\n".join(lines)


def render_json(report: dict[str, object]) -> str:
    return json.dumps(report, indent=2, sort_keys=False)
