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
from spotreel.platform.ports import free_port
from spotreel.services.gateway.metrics import Metrics as GatewayMetrics
from spotreel.config.settings import Settings
from tests.unit.test_slo_report import _job

pytestmark = [pytest.mark.integration, pytest.mark.serial, pytest.mark.timeout(180)]


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
        prom.write_targets("gateway", [f"{mine.host}:{server.server_port}"],
                           {"service": "gateway", "topic_prefix": f"test.{unique}"})
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


def _posts(url: str) -> dict[str, float]:
    """The running gateway's own cumulative buckets of 202s to POST /v1/videos, read from its metrics port."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if (s.name == "spotreel_gateway_request_seconds_bucket" and s.labels.get("route") == "/v1/videos"
                    and s.labels.get("method") == "POST" and s.labels.get("status") == "202"):
                out[s.labels["le"]] = s.value
    return out


def _bucket_of(q: float, buckets: dict[str, float]) -> tuple[float, float]:
    """The (lower, upper) bounds of the bucket that holds rank q of cumulative `buckets`."""
    bounds = sorted((float(le), n) for le, n in buckets.items())
    rank, lower = q * bounds[-1][1], 0.0
    for upper, n in bounds:
        if n >= rank:
            return lower, upper
        lower = upper
    raise AssertionError("unreachable")


def test_submit_ack_from_the_running_gateway_scraped_by_a_real_prometheus(stack, settings: Settings,
                                                                          tmp_path: Path) -> None:
    """Videos submitted through the local stack's running gateway; a real Prometheus scrapes its internal
    metrics port; `spotreel slo --prometheus --submitted FROM:TO` reports the ack's p50 and p99 over exactly
    that window, judged against 100 ms. The figures equal histogram_quantile of the gateway's own bucket
    deltas over the window (read from its /metrics before and after) when no one else submitted meanwhile."""
    from spotreel.client.http import Client, ClientError
    from spotreel.devstack.services import gateway_metrics_port
    from spotreel.services.simulator.slo_cli import ack_from_prometheus, histogram_quantile

    metrics_url = f"http://{settings.host}:{gateway_metrics_port(settings)}"
    client = Client(settings.gateway_url, settings.dev_api_key)
    body = {"prompt": "an ack measured", "num_steps": 2, "delay_seconds": 3600}  # never leased in the test
    mine = dataclasses.replace(settings, home=tmp_path / "home")
    prom = Prometheus(mine, port=free_port(mine.host), scrape_interval="1s")
    lines: list[str] = []
    jobs: list[str] = []
    n_submits = 30
    series = 'spotreel_gateway_request_seconds_count{method="POST",route="/v1/videos",status="202"}'

    def submit() -> None:  # paced under the dev tenant's rate, which other tests share; a 429 waits its turn
        for _ in range(20):
            try:
                jobs.append(client.submit(body)["job_id"])
                time.sleep(0.15)
                return
            except ClientError as exc:
                if exc.status != 429:
                    raise
                time.sleep(1)
        raise AssertionError("the gateway refused 20 submissions in a row")

    def scraped(at_least: float, after_s: float) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            got = prom.query(f"{series} and timestamp({series}) > {after_s:.3f}")
            if got and float(got[0]["value"][1]) >= at_least:
                return
            time.sleep(0.2)
        raise AssertionError(f"Prometheus did not scrape {at_least} acks after {after_s}: {got}")

    try:
        prom.preflight()
        before_prometheus_s = time.time() - 5
        prom.write_targets("gateway", [f"{settings.host}:{gateway_metrics_port(settings)}"],  # as `monitoring up`
                           {"service": "gateway", "topic_prefix": settings.topic_prefix})
        prom.ensure_up(lines.append)
        submit()  # the 202 series exists before the window opens
        start = _posts(metrics_url)
        from_ms = int(time.time() * 1000)
        scraped(start["+Inf"], from_ms / 1000)  # the window's first sample: the count before our acks
        for _ in range(n_submits):
            submit()
        scraped(start["+Inf"] + n_submits, time.time())
        end = _posts(metrics_url)
        to_ms = int(time.time() * 1000) + 1
        done = subprocess.run([sys.executable, "-m", "spotreel.cli", "slo", "--prometheus", prom.address(),
                               "--submitted", f"{from_ms}:{to_ms}", "--json"],
                              capture_output=True, text=True, timeout=120)
        text = subprocess.run([sys.executable, "-m", "spotreel.cli", "slo", "--prometheus", prom.address(),
                               "--submitted", f"{from_ms}:{to_ms}"], capture_output=True, text=True, timeout=120)
        # a window before this Prometheus existed: no figure, and the note says why
        quiet = ack_from_prometheus(prom.address(), "2s", before_prometheus_s, prefix=settings.topic_prefix)
        other_stack = ack_from_prometheus(prom.address(), "1m", prefix="not-this-stack")  # another stack's acks
    finally:
        prom.stop(lines.append)
        for job in jobs:
            client.cancel(job)
    assert done.returncode == 0, done.stderr
    print(text.stdout, f"gateway's own delta over the window: {end['+Inf'] - start['+Inf']:g} acks", sep="\n")
    ack = json.loads(done.stdout)["slos"]["ack"]
    assert ack["status"] == ("met" if ack["value_s"] <= 0.1 else "missed"), ack
    assert 0 < ack["p50_s"] <= ack["value_s"] < 10, ack
    assert n_submits <= ack["n"] < 3 * n_submits, ack  # others may submit to the shared stack meanwhile
    delta = {le: end[le] - start[le] for le in end}
    if delta["+Inf"] == n_submits:  # nobody else submitted in the window: the figures are these, exactly
        # Counted from Prometheus' samples without extrapolation (slo_cli.counter_increase): PromQL's increase()
        # extrapolates each bucket on its own, and a p99 of 30 acks all under 25 ms can read as 67 ms.
        exact = {float(le): n for le, n in delta.items()}
        assert ack["n"] == n_submits, (ack, delta)
        for key, q in (("value_s", 0.99), ("p50_s", 0.5)):
            lower, upper = _bucket_of(q, delta)
            assert ack[key] == pytest.approx(histogram_quantile(q, exact)), (key, ack, delta)
            assert lower <= ack[key] <= upper, (key, ack, delta)
    assert text.returncode == 0, text.stderr
    row = next(line for line in text.stdout.splitlines() if line.startswith("submit ack"))
    assert row.split()[-1] == ack["status"] and "p99 <= 0.1 s" in row, text.stdout
    assert quiet["p99"] is None and "no spotreel_gateway_request_seconds{" in quiet["note"], quiet
    assert other_stack["p99"] is None and 'topic_prefix="not-this-stack"' in other_stack["note"], other_stack
