"""The services in the local stack: their settings travel to the child unchanged, they start after and stop
before the servers, and their probes speak to the real HTTP endpoints."""

from __future__ import annotations

import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from spotreel.platform.errors import ProbeFailed
from spotreel.devstack.services import (GatewayService, ProjectorService, SchedulerService, projector_metrics_port,
                                     scheduler_metrics_port, settings_env)
from spotreel.devstack.stack import components, tiers
from spotreel.config.settings import Settings


def test_settings_round_trip_through_the_environment():
    s = Settings(home=Path("/tmp/x"), topic_prefix="acme", cassandra_keyspace="ks1", partitions=3, gateway_port=1234)
    assert Settings.from_env(settings_env(s)) == s


def test_services_start_after_and_stop_before_the_servers():
    comps = components(Settings())
    names = [[c.name for c in t] for t in tiers(comps)]
    assert names == [["kafka", "cassandra", "s3"], ["scheduler", "projector", "gateway", "webhooks"]]


def test_service_commands_use_the_default_prefix_and_loopback_ports():
    s = Settings(home=Path("/tmp/h"))
    sched, proj, gw = SchedulerService(s), ProjectorService(s), GatewayService(s)
    assert sched.ports() == [scheduler_metrics_port(s)] and proj.ports() == [projector_metrics_port(s)]
    assert gw.ports() == [s.gateway_port, s.gateway_port + 4]  # public API, internal metrics
    assert gw.command()[-3:] == ["gateway", "--metrics-port", str(s.gateway_port + 4)]
    assert sched.command()[-4:] == ["--metrics-port", str(s.gateway_port + 1), "--data-dir",
                                     "/tmp/h/data/scheduler/spotreel.scheduler"]
    env = gw.env()
    assert env["SPOTREEL_TOPIC_PREFIX"] == "spotreel" and env["SPOTREEL_HOST"] == "127.0.0.1"
    assert sched.stdout_log == Path("/tmp/h/logs/scheduler/stdout.log")


def _serve(body: bytes, status: int = 200):
    class H(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(status)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_probes_read_the_real_endpoints():
    metrics = (b'spotreel_scheduler_commands_total 3.0\n'
               b'spotreel_scheduler_consumer_lag{partition="0"} 0.0\n'
               b'spotreel_scheduler_consumer_lag{partition="2"} 1.0\n'
               b'spotreel_projection_lag 4.0\n')
    srv = _serve(metrics)
    try:
        port = srv.server_address[1]
        s = Settings(gateway_port=port - 1)
        assert SchedulerService(s).probe(1.0) == "owns partitions [0, 2]"
        assert ProjectorService(replace(s, gateway_port=port - 2)).probe(1.0) == "projection lag 4 events"
        with pytest.raises(ProbeFailed):
            GatewayService(replace(s, gateway_port=port)).probe(1.0)  # no "ok" in the body
    finally:
        srv.shutdown()
    with pytest.raises(ProbeFailed, match="failed"):
        GatewayService(Settings(gateway_port=port)).probe(0.5)
