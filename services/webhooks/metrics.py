"""Prometheus metrics of the notifier, in a registry of its own (no module-level collectors)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

# Counters' and histograms' `_created` timestamps would come out as separate gauge families.
disable_created_metrics()


@dataclass(frozen=True)
class WebhookMetrics:
    registry: CollectorRegistry
    deliveries: Counter
    attempts: Counter
    in_flight: Gauge
    latency: Histogram

    @classmethod
    def create(cls) -> "WebhookMetrics":
        r = CollectorRegistry()
        return cls(
            registry=r,
            deliveries=Counter("spotreel_webhook_deliveries", "webhooks by final outcome", ["outcome"], registry=r),
            attempts=Counter("spotreel_webhook_attempts", "failed attempts that will be retried", ["result"],
                             registry=r),
            in_flight=Gauge("spotreel_webhook_in_flight", "deliveries not finished yet", registry=r),
            latency=Histogram("spotreel_webhook_delivery_seconds", "first attempt to final outcome", registry=r,
                              buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)),
        )
