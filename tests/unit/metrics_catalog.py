"""Every spotreel process's metric registry, built as the process builds it, and the sample names they can
export: what the monitoring lint test (alert rules, dashboards, console templates) checks names against."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

from spotreel.services.capacity.metrics import CapacityMetrics
from spotreel.services.gateway.metrics import Metrics as GatewayMetrics
from spotreel.services.projector.service import metrics_registry as projector_registry
from spotreel.services.scheduler.metrics import Metrics as SchedulerMetrics
from spotreel.services.webhooks.metrics import WebhookMetrics
from spotreel.worker.metrics import WorkerMetrics

SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",),
            "summary": ("", "_count", "_sum")}
# Series Prometheus makes itself for every target, and the ALERTS series of its rule evaluation.
BUILTIN = {"up", "scrape_duration_seconds", "scrape_samples_scraped", "ALERTS", "ALERTS_FOR_STATE"}


def registries() -> dict[str, CollectorRegistry]:
    return {
        "scheduler": SchedulerMetrics().registry,
        "gateway": GatewayMetrics.create().registry,
        "projector": projector_registry()[0],
        "webhooks": WebhookMetrics.create().registry,
        "worker": WorkerMetrics().registry,
        "capacity": CapacityMetrics().registry,
    }


def exported_names() -> set[str]:
    names: set[str] = set()
    for registry in registries().values():
        for family in registry.collect():
            names.update(family.name + s for s in SUFFIXES[family.type])
    return names


# A metric name in PromQL: starts with spotreel_ (ours) or is one of Prometheus' own.
_NAME = re.compile(r"\b(spotreel_[a-z0-9_]+|up|ALERTS)\b")


def referenced_names(promql: str) -> set[str]:
    # Label values in quotes (pool="spotreel_x") are not metric names.
    return set(_NAME.findall(re.sub(r'"[^"]*"', '""', promql)))
