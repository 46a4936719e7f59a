"""`spotreel slo` as a process: it reads a run's events from the real Kafka topic of the prefix it is given and
the submit ack from a real Prometheus scraping a gateway's registry, and judges each SLO."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from prometheus_client import start_http_server

from spotreel.codec import Codec
from spotreel.devstack.monitoring import Prometheus
from spotreel.devstack.ports import free_port
from spotreel.services.gateway.metrics import Metrics as GatewayMetrics
from spotreel.settings import Settings
from tests.unit.test_slo_report import _job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_slo_report_from_a_topic_and_prometheus(stack, settings: Settings, make_topic, unique: str,
                                                tmp_path: Path) -> None:
    topic = make_topic("events", partitions=1)
    assert topic == f"test.{unique}.events"
    events = (_job("a", 9, 150) + _job("b", 9, 250) + _job("c", 0, 40_000)
              + _job("d", 0, 0, preempt="vanish", recover_ms=8_000))
    codec, producer = Codec.default(), Producer({"bootstrap.servers": settings.kafka_bootstrap})
    for e in events:
        producer.produce(topic, codec.encode_message(e), e.job_id.encode(), partition=0)
    assert producer.flush(30) == 0

    mine = dataclasses.replace(settings, home=tmp_path / "home")
    prom = Prometheus(mine, port=free_port(mine.host), scrape_interval="1s")
    gateway = GatewayMetrics.create()
    server, thread = start_http_server(free_port(mine.host), addr=mine.host, registry=gateway.registry)
    acks = gateway.latency.labels("POST", "/v1/videos", "202")
    lines: list[str] = []
    try:
        prom.preflight()
        prom.write_targets("gateway", [f"{mine.host}:{server.server_port}"], {"service": "gateway"})
        prom.ensure_up(lines.append)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not prom.query('spotreel_gateway_request_seconds_count'):
            acks.observe(0.004)  # scraped once before the acks below, so their increase is seen
            time.sleep(0.5)
        for _ in range(99):
            acks.observe(0.02)
        acks.observe(2.0)  # the 100th: p99 lands in the 0.025 s bucket, so the ack SLO is met
        time.sleep(3)  # two more scrapes
        env = {**os.environ, "SPOTREEL_TOPIC_PREFIX": "spotreel"}  # --prefix must win over the environment
        done = subprocess.run([sys.executable, "-m", "spotreel.cli", "slo", "--prefix", f"test.{unique}",
                               "--partitions", "1", "--prometheus", prom.address(), "--window", "1m", "--json"],
                              env=env, capture_output=True, text=True, timeout=120)
    finally:
        prom.stop(lines.append)
        server.shutdown()
        thread.join(5)
    assert done.returncode == 0, done.stderr
    rep = json.loads(done.stdout)
    assert rep["events_read"] == len(events) and rep["topic_prefix"] == f"test.{unique}"
    slos = rep["slos"]
    assert slos["pickup"]["9"]["status"] == "met" and slos["pickup"]["0"]["status"] == "missed"
    assert slos["p0_start_p50"]["value_s"] == 0.15
    assert slos["recovery"] == {**slos["recovery"], "value_s": 8.0, "n": 1, "status": "met"}
    assert slos["ack"]["status"] == "met" and 0.01 < slos["ack"]["value_s"] <= 0.025, slos["ack"]
